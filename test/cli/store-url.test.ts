// The parts of the store commands that need no store: URL forms, driver loading, body previews.
import { describe, expect, it } from 'vitest';
import { CliUsageError } from '../../src/check/errors.js';
import { HEX_PREVIEW_BYTES, TEXT_PREVIEW_BYTES, bodyPreview } from '../../src/cli/admin.js';
import { parseDuration } from '../../src/check/flags.js';
import { importDriver, parseStoreUrl, redact } from '../../src/cli/store-url.js';

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
