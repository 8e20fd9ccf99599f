// The parts of the store commands that need no store: URL forms, driver loading, body previews.
import { describe, expect, it } from 'vitest';
import { CliUsageError } from '../../src/check/errors.js';
import { HEX_PREVIEW_BYTES, TEXT_PREVIEW_BYTES, bodyPreview } from '../../src/cli/format.js';
import { parseDuration } from '../../src/check/flags.js';
import { importDriver } from '../../src/cli/open/driver.js';
import { parseStoreUrl, redact, scrub } from '../../src/cli/store-url.js';
import { printable, quoted, terminalJson, terminalText } from '../../src/cli/terminal.js';

describe('store URLs', () => {
  it('reads the forms the examples use, and more', () => {
    expect(parseStoreUrl('sqlite:/var/lib/app/records.db')).toMatchObject({ kind: 'sqlite', target: '/var/lib/app/records.db' });
    expect(parseStoreUrl('sqlite:records.db')).toMatchObject({ kind: 'sqlite', target: 'records.db' });
    expect(parseStoreUrl('sqlite:///tmp/x.db')).toMatchObject({ kind: 'sqlite', target: '/tmp/x.db' });
    expect(parseStoreUrl('postgres://u:p@db:5432/app')).toMatchObject({ kind: 'postgres', shown: 'postgres://u:***@db:5432/app' });
    expect(parseStoreUrl('postgresql://db/app')).toMatchObject({ kind: 'postgres' });
    expect(parseStoreUrl('mariadb://root@db/app')).toMatchObject({ kind: 'mysql', target: 'mysql://root@db/app' });
    expect(parseStoreUrl('rediss://:pw@cache:6380/0')).toMatchObject({ kind: 'redis', shown: 'rediss://:***@cache:6380/0' });
    expect(parseStoreUrl('redis+cluster://10.0.0.1:7000,10.0.0.2:7001')).toMatchObject({
      kind: 'redis',
      clusterNodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: '10.0.0.2', port: 7001 },
      ],
    });
  });

  it('refuses what it cannot open, naming the forms and never the password', () => {
    for (const url of ['sqlite:', 'sqlite::memory:', 'mongodb://x/y', 'postgres://', 'redis+cluster://a,b:1', 'http://u:secret@x']) {
      let error: unknown;
      try {
        parseStoreUrl(url);
      } catch (e) {
        error = e;
      }
      expect(error, url).toBeInstanceOf(CliUsageError);
      expect((error as Error).message).toMatch(/expected sqlite:FILE, postgres:\/\//);
      expect((error as Error).message).not.toContain('secret');
    }
    expect(redact('mysql://root:hunter2@db/app')).toBe('mysql://root:***@db/app');
    expect(redact('redis://db:6379')).toBe('redis://db:6379');
  });

  // Every credential form pg (pg-connection-string), mysql2 and ioredis read from a URL.
  const SECRET = 'Zq9xW7kk';
  it('hides every credential form the drivers accept: user-info password, password= and key material in the query', () => {
    const cases: Array<[string, string]> = [
      [`postgres://app:${SECRET}@db:5432/pay`, 'postgres://app:***@db:5432/pay'],
      [`postgres://app@db/pay?password=${SECRET}`, 'postgres://app@db/pay?password=***'],
      [`postgresql://app@db/pay?sslmode=require&sslkey=/etc/keys/${SECRET}.key&sslpassword=${SECRET}&application_name=web`, 'postgresql://app@db/pay?sslmode=require&sslkey=***&sslpassword=***&application_name=web'],
      [`mysql://root:${SECRET}@db:3306/app`, 'mysql://root:***@db:3306/app'],
      [`mariadb://root@db/app?password=${SECRET}&ssl=true`, 'mariadb://root@db/app?password=***&ssl=true'],
      [`mysql://root@db/app?password1=${SECRET}&passwordSha1=${SECRET}`, 'mysql://root@db/app?password1=***&passwordSha1=***'],
      [`mysql://root@db/app?ssl=${encodeURIComponent(JSON.stringify({ key: SECRET }))}`, 'mysql://root@db/app?ssl=***'],
      [`redis://:${SECRET}@cache:6379`, 'redis://:***@cache:6379'],
      [`redis://default:${SECRET}@cache:6379/2`, 'redis://default:***@cache:6379/2'],
      [`rediss://cache:6380?password=${SECRET}&db=1`, 'rediss://cache:6380?password=***&db=1'],
      [`redis://cache:6379?tls=${SECRET}`, 'redis://cache:6379?tls=***'],
    ];
    for (const [url, shown] of cases) {
      expect(redact(url), url).toBe(shown);
      const parsed = parseStoreUrl(url);
      expect(parsed.shown, url).toBe(shown);
      // A driver message that echoes a secret loses it too.
      expect(scrub(`failed for ${SECRET}.`, parsed), url).toBe('failed for ***.');
    }
    // Percent-encoded: shown as ***, and taken out of messages as written and as the driver decodes it.
    const encoded = parseStoreUrl(`postgres://app:p%40${SECRET}@db/pay`);
    expect(encoded.shown).toBe('postgres://app:***@db/pay');
    expect(scrub(`password p@${SECRET} or p%40${SECRET}`, encoded)).toBe('password *** or ***');
  });

  it('refuses a URL whose password the parser would misread, showing only its scheme', () => {
    for (const url of [
      `postgres://app:${SECRET.slice(0, 3)}/${SECRET.slice(3)}@db/pay`,
      `postgres://app:1/${SECRET}@db/pay`,
      `postgres://app:${SECRET.slice(0, 3)}?${SECRET.slice(3)}@db/pay`,
      `postgres://app:${SECRET.slice(0, 3)}#${SECRET.slice(3)}@db/pay`,
      `mysql://root:${SECRET.slice(0, 3)}/${SECRET.slice(3)}@db/app`,
      `redis://:${SECRET.slice(0, 3)}/${SECRET.slice(3)}@cache:6379`,
      `redis://:1/${SECRET}@cache:6379`,
      `redis+cluster://:${SECRET}@10.0.0.1:7000,10.0.0.2:7001`,
      `redis+cluster://10.0.0.1:7000,10.0.0.2:7001?password=${SECRET}`,
      `mongodb://app:${SECRET.slice(0, 3)}/${SECRET.slice(3)}@db/x`,
    ]) {
      let error: unknown;
      try {
        parseStoreUrl(url);
      } catch (e) {
        error = e;
      }
      expect(error, url).toBeInstanceOf(CliUsageError);
      const message = (error as Error).message;
      expect(message, url).not.toContain(SECRET.slice(0, 3));
      expect(message, url).not.toContain(SECRET.slice(3));
      expect(message, url).toMatch(/"[a-z+]+:\/\/…"/);
    }
    expect(redact(`postgres://app:${SECRET.slice(0, 3)}/${SECRET.slice(3)}@db/pay`)).toBe('postgres://…');
    expect(redact('not a url')).toBe('(not a URL)');
    expect(parseStoreUrl('redis+cluster://10.0.0.1:7000,10.0.0.2:7001').shown).toBe('redis+cluster://10.0.0.1:7000,10.0.0.2:7001');
  });

  it('names the package to install when a driver is missing', async () => {
    const missing = async () => {
      throw Object.assign(new Error("Cannot find package 'pg'"), { code: 'ERR_MODULE_NOT_FOUND' });
    };
    await expect(importDriver('postgres', missing)).rejects.toThrow(new CliUsageError('postgres store URLs need the pg package, which is not installed: npm install pg'));
    await expect(importDriver('sqlite', missing)).rejects.toThrow(/npm install better-sqlite3/);
    await expect(importDriver('mysql', missing)).rejects.toThrow(/npm install mysql2/);
    await expect(importDriver('redis', missing)).rejects.toThrow(/npm install ioredis/);
    expect(await importDriver('redis', async (name) => ({ name }))).toEqual({ name: 'ioredis' });
  });
});

describe('terminal output', () => {
  const HOSTILE = '\x1b]0;pwned\x07\x1b[2K\x1b[1A\x1b]52;c;cHduZWQ=\x07\x9b31m\x7f\u202eevil\u2028\n\r\t';
  it('escapes C0, DEL, C1, line separators, bidi controls and lone surrogates in a field', () => {
    expect(printable(HOSTILE)).toBe('\\x1b]0;pwned\\x07\\x1b[2K\\x1b[1A\\x1b]52;c;cHduZWQ=\\x07\\x9b31m\\x7f\\u202eevil\\u2028\\n\\r\\t');
    expect(printable('a\ud800b\u{1f600}é')).toBe('a\\ud800b\u{1f600}é');
    expect(quoted('\x1b\x9b')).toBe('"\\u001b\\x9b"');
    // Whole lines keep their newlines and nothing else.
    expect(terminalText(`one ${HOSTILE}\ntwo`)).toBe(`one ${printable(HOSTILE).replace('\\n', '\n')}\ntwo`);
  });

  it('writes JSON with nothing a terminal acts on, and the same value', () => {
    const value = { body: HOSTILE, lone: '\udc00', nested: [HOSTILE] };
    const text = terminalJson(value, 2);
    expect(text).not.toMatch(/[^\P{Cc}\n]|[\u2028\u2029\u202e]/u);
    expect(JSON.parse(text)).toEqual(value);
    expect(text).toContain('\\u009b');
    expect(text).toContain('\\u2028');
  });
});

describe('body previews', () => {
  it('shows UTF-8 text, cut at a character boundary, and anything else as a hex prefix', () => {
    expect(bodyPreview(new TextEncoder().encode('{"ok":true}'))).toEqual({ bytes: 11, encoding: 'utf8', preview: '{"ok":true}', truncated: false });
    // 'é' is two bytes: a cut inside it backs up to before it.
    const text = 'a'.repeat(TEXT_PREVIEW_BYTES - 1) + 'é' + 'b';
    const long = bodyPreview(new TextEncoder().encode(text));
    expect(long).toMatchObject({ bytes: TEXT_PREVIEW_BYTES + 2, encoding: 'utf8', truncated: true });
    expect(long.preview).toBe('a'.repeat(TEXT_PREVIEW_BYTES - 1));
    const binary = bodyPreview(Uint8Array.from({ length: 100 }, (_, i) => (i * 37) % 256 | 0x80));
    expect(binary).toMatchObject({ bytes: 100, encoding: 'hex', truncated: true });
    expect(binary.preview).toHaveLength(HEX_PREVIEW_BYTES * 2);
    expect(bodyPreview(new Uint8Array(0))).toEqual({ bytes: 0, encoding: 'utf8', preview: '', truncated: false });
  });
});

describe('durations', () => {
  it('takes units from ms to days, and a bare number in the unit asked for', () => {
    expect([parseDuration('500ms'), parseDuration('30s'), parseDuration('5m'), parseDuration('2h'), parseDuration('1d'), parseDuration('10')]).toEqual([
      500, 30_000, 300_000, 7_200_000, 86_400_000, 10_000,
    ]);
    expect(parseDuration('1.5m')).toBe(90_000);
    expect(parseDuration('soon')).toBeUndefined();
    expect(parseDuration('-5m')).toBeUndefined();
  });
});
