/**
 * `idemkit ui`: the page over every store that has a URL (SQLite temp file, PostgreSQL, MariaDB,
 * Redis, DynamoDB on dynalite, each with its own table or prefix), through `runUi` in this
 * process as the executable runs it; the token and binding rules; and one run in a real browser
 * (Debian's chromium driven by playwright-core) against a record made through the Hono example,
 * with the `idemkit ui` executable as a subprocess.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { createPool } from 'mysql2/promise';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { CliUsageError } from '../../src/check/errors.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import type { IdempotencyStore, RecordRef, StoredResponse } from '../../src/core/store.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { dynamodbStore } from '../../src/stores/dynamodb/index.js';
import { runUi } from '../../src/cli/ui.js';
import { SESSION_MAX_AGE_S, isLoopback } from '../../src/cli/ui/auth.js';
import { esc } from '../../src/cli/ui/html.js';
import { startUi } from '../../src/cli/ui/server.js';
import { startExample } from '../support/examples.js';
import { deleteKeys } from '../support/redis-servers.js';
import { MARIADB, POSTGRES, REDIS, requireService } from '../support/services.js';
import { startDynalite, withTtlApi } from '../stores/dynamodb-support.js';

const [pgUp, mysqlUp, redisUp] = [await requireService(POSTGRES), await requireService(MARIADB), await requireService(REDIS)];

const root = join(import.meta.dirname, '..', '..');
const LIVE = { leaseMs: 3_600_000, windowMs: 7_200_000 };
const name = () => `idem_ui_${randomBytes(4).toString('hex')}`;
const TOKEN = 'test-token-0123456789abcdef';
const XSS_KEY = '<script>alert("key")</script>';
const XSS_BODY = '{"note":"<img src=x onerror=alert(1)>"}';
const response = (body: string | Uint8Array, status = 201): StoredResponse => ({
  status,
  headers: [['content-type', typeof body === 'string' ? 'application/json' : 'application/octet-stream']],
  body: typeof body === 'string' ? new TextEncoder().encode(body) : body,
  bodyOmitted: false,
});

async function done(store: IdempotencyStore, ref: RecordRef, body: string | Uint8Array, status = 201): Promise<void> {
  const claim = await store.claim(ref, `fp-${ref.key}`, LIVE);
  if (claim.kind !== 'acquired') throw new Error(`seed: ${claim.kind}`);
  await store.complete(ref, claim.token, response(body, status));
}

/** `idemkit ui` in this process, as main.ts runs it, until `stop()`. */
async function serve(args: readonly string[], env: NodeJS.ProcessEnv = {}) {
  const control = new AbortController();
  let stdout = '';
  let stderr = '';
  let resolveUrl: (url: string) => void = () => {};
  const listening = new Promise<string>((resolve) => (resolveUrl = resolve));
  const exited = runUi(
    args,
    {
      out: (text) => {
        stdout += `${text}\n`;
        const match = /listening on (http:\/\/\S+)/.exec(text);
        if (match) resolveUrl(match[1]!);
      },
      err: (text) => (stderr += `${text}\n`),
    },
    env,
    control.signal,
  );
  const url = await Promise.race([listening, exited.then((code) => Promise.reject(new Error(`idemkit ui exited with ${code}: ${stderr}`)))]);
  return {
    url,
    output: () => ({ stdout, stderr }),
    stop: async () => {
      control.abort();
      return exited;
    },
  };
}

/** A plain GET with any headers (fetch will not send a Host of our choosing). */
function rawGet(url: string, headers: Record<string, string>): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.once('error', reject);
    req.end();
  });
}

interface Target {
  readonly args: string[];
  readonly store: IdempotencyStore;
  close(): Promise<void>;
}

function pageOn(label: string, skip: boolean, open: () => Promise<Target>) {
  describe.skipIf(skip)(`idemkit ui on ${label}`, () => {
    let t: Target;
    let ui: Awaited<ReturnType<typeof serve>>;
    const scope = `tenant-${randomBytes(3).toString('hex')}`;
    const other = `${scope}-b`;
    const get = (path: string) => fetch(new URL(path, ui.url));
    const html = async (path: string, status = 200) => {
      const res = await get(path);
      expect(res.status).toBe(status);
      expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
      return res.text();
    };

    beforeAll(async () => {
      t = await open();
      await done(t.store, { scope, key: 'order-1' }, '{"id":"ch_1","amount":1200}');
      await done(t.store, { scope, key: XSS_KEY }, XSS_BODY);
      await done(t.store, { scope: other, key: 'bin-1' }, Uint8Array.from([0xff, 0x00, 0xfe, 0x41]), 200);
      await t.store.claim({ scope: other, key: 'running-1' }, 'fp-running', LIVE);
      // In flight with its lease already over: an abandoned record, which `older=0s` keeps.
      await t.store.claim({ scope: other, key: 'gone-1' }, 'fp-gone', { leaseMs: 1, windowMs: LIVE.windowMs });
      ui = await serve(t.args);
    }, 30_000);
    afterAll(async () => {
      if (ui) expect(await ui.stop()).toBe(0);
      await t?.close();
    });

    it('lists every record with its state, scope and key, and links each to its detail', async () => {
      const page = await html('/');
      for (const key of ['order-1', 'bin-1', 'running-1', 'gone-1']) expect(page).toContain(`>${key}</a>`);
      expect(page).toContain(`<td class="scope">${scope}</td>`);
      expect(page).toContain(`href="/record?scope=${encodeURIComponent(scope)}&amp;key=order-1"`);
      expect(page).toMatch(/<span class="badge in_flight">in flight<\/span>/);
      expect(page).toMatch(/<span class="badge completed">completed<\/span>/);
      expect(page).toContain('5 records');
      // Each age counts from the claim; its tooltip gives the creation and last update.
      expect(page).toMatch(/<td title="created \d{4}-[\d-]+T[\d:.]+Z, updated \d{4}-[\d-]+T[\d:.]+Z">\d[^<(]*<\/td>/);
      expect(page).toMatch(/<td title="created [^"]+">\d[^<(]* \(owner gone \d[^)]*\)<\/td>/);
      // The list's order is the lease's: a Lease column shows it (the time in its tooltip), earliest first.
      expect(page).toMatch(/<th aria-sort="ascending" title="[^"]*lease[^"]*">Lease<\/th>/);
      const leases = [...page.matchAll(/<td class="lease" title="([^"]+)">([^<]+)<\/td>/g)];
      expect(leases).toHaveLength(5);
      const times = leases.map((m) => Date.parse(m[1]!));
      expect(times.every(Number.isFinite)).toBe(true);
      expect(times).toEqual([...times].sort((a, b) => a - b));
      expect(leases[0]![2]).toMatch(/^ended \d\S* ago$/);
      expect(leases.at(-1)![2]).toMatch(/^ends in \d/);
    });

    it('filters by state, scope and older-than, caps at the limit, and answers 400 to a bad filter', async () => {
      const completed = await html(`/?state=completed&scope=${encodeURIComponent(scope)}`);
      expect(completed).toContain('>order-1</a>');
      expect(completed).not.toContain('>running-1</a>');
      expect(completed).toContain('2 records');
      const inFlight = await html('/?state=in_flight');
      expect(inFlight).toContain('>running-1</a>');
      expect(inFlight).not.toContain('>order-1</a>');
      const otherScope = await html(`/?scope=${encodeURIComponent(other)}`);
      expect(otherScope).toContain('>bin-1</a>');
      expect(otherScope).not.toContain('>order-1</a>');
      // Age counts from the claim: every record is "older than 0s"; none is older than a day.
      const old = await html('/?older=0s');
      for (const key of ['order-1', 'bin-1', 'running-1', 'gone-1']) expect(old).toContain(`>${key}</a>`);
      expect(await html('/?older=1d')).toContain('No records match.');
      const one = await html('/?limit=1');
      expect(one).toContain('The first 1');
      expect(one.match(/<td class="key">/g)).toHaveLength(1);
      const bad = await html('/?older=soon', 400);
      expect(bad).toContain('older than: expected a duration');
      expect(await html('/?state=done', 400)).toContain('state: expected in_flight or completed');
      const api = (await (await get('/api/records?state=completed')).json()) as { records: Array<{ key: string }> };
      expect(api.records.map((r) => r.key).sort()).toEqual([XSS_KEY, 'bin-1', 'order-1'].sort());
    });

    it('shows a record in detail: state, owner, fingerprint, the stored status, headers and body', async () => {
      const page = await html(`/record?scope=${encodeURIComponent(scope)}&key=order-1`);
      expect(page).toContain('<span class="badge completed">completed</span>');
      expect(page).toContain('<code>fp-order-1</code>');
      expect(page).toMatch(/token <code>[0-9a-f]{8}…<\/code>, attempt 1/);
      expect(page).toMatch(/<tr><th>Created<\/th><td>\d{4}-[\d-]+T[\d:.]+Z <span class="hint">\(/);
      expect(page).toMatch(/<tr><th>Updated<\/th><td>\d{4}-[\d-]+T[\d:.]+Z <span class="hint">\(/);
      expect(page).toContain('<b class="status">201</b>');
      expect(page).toContain('<tr><th>content-type</th><td>application/json</td></tr>');
      expect(page).toContain('<pre class="body">{&quot;id&quot;:&quot;ch_1&quot;,&quot;amount&quot;:1200}</pre>');
      const binary = await html(`/record?scope=${encodeURIComponent(other)}&key=bin-1`);
      expect(binary).toContain('4 bytes, binary (hex)');
      expect(binary).toContain('<pre class="body hex">ff 00 fe 41</pre>');
      const running = await html(`/record?scope=${encodeURIComponent(other)}&key=running-1`);
      expect(running).toContain('None yet: the record is in flight.');
      const json = (await (await get(`/api/record?scope=${encodeURIComponent(scope)}&key=order-1`)).json()) as { response: { status: number; body: { preview: string } } };
      expect(json.response.status).toBe(201);
      expect(json.response.body.preview).toBe('{"id":"ch_1","amount":1200}');
    });

    it('answers 404 for an unknown record or path, 400 without scope and key', async () => {
      expect(await html(`/record?scope=${encodeURIComponent(scope)}&key=nope`, 404)).toContain('No record for key <code>nope</code>');
      expect((await get(`/api/record?scope=${encodeURIComponent(scope)}&key=nope`)).status).toBe(404);
      expect(await html('/record?key=order-1', 400)).toContain('scope and key are required');
      expect(await html('/nothing-here', 404)).toContain('Nothing at /nothing-here');
    });

    it('escapes client-chosen keys and bodies everywhere', async () => {
      const list = await html('/');
      expect(list).not.toContain('<script>alert');
      expect(list).toContain(`>${esc(XSS_KEY)}</a>`);
      expect(list).toContain(`key=${encodeURIComponent(XSS_KEY).replace(/[()]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)}"`);
      const detail = await html(`/record?${new URLSearchParams({ scope, key: XSS_KEY }).toString()}`);
      expect(detail).not.toContain('<script>alert');
      expect(detail).not.toContain('<img src=x');
      expect(detail).toContain(`<code class="key">${esc(XSS_KEY)}</code>`);
      expect(detail).toContain(esc(XSS_BODY));
      const missing = await html(`/record?${new URLSearchParams({ scope, key: '<b>nope</b>' }).toString()}`, 404);
      expect(missing).not.toContain('<b>nope</b>');
      expect(await html('/%3Cscript%3E', 404)).not.toContain('/<script>');
      // Only the page's own script tag.
      expect(list.match(/<script/g)).toEqual(['<script']);
    });

    it('serves live counts as JSON, and never changes a record (GET and HEAD only)', async () => {
      const stats = (await (await get('/api/stats')).json()) as Record<string, unknown>;
      expect(stats).toMatchObject({ inFlight: 2, completed: 3, expired: 0 });
      expect(stats.abandoned).toBe(1);
      for (const method of ['POST', 'DELETE', 'PUT']) {
        const res = await fetch(new URL(`/record?scope=${encodeURIComponent(scope)}&key=order-1`, ui.url), { method });
        expect(res.status).toBe(405);
        expect(res.headers.get('allow')).toBe('GET, HEAD');
      }
      expect((await t.store.get({ scope, key: 'order-1' }))?.state).toBe('completed');
      const head = await fetch(ui.url, { method: 'HEAD' });
      expect(head.status).toBe(200);
    });
  });
}

pageOn('SQLite', false, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-ui-'));
  const file = join(dir, 'records.db');
  const table = name();
  const db = new Database(file);
  const store = sqliteStore({ database: db, table });
  return {
    args: ['--store', `sqlite:${file}`, '--table', table],
    store,
    close: async () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

const PG_URL = `postgres://${process.env.PGUSER ?? 'postgres'}@127.0.0.1:5432/test`;
pageOn('PostgreSQL', !pgUp, async () => {
  const pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
  pool.on('error', () => {});
  const table = name();
  const store = postgresStore({ pool, table });
  await store.migrate();
  return {
    args: ['--store', PG_URL, '--table', table],
    store,
    close: async () => {
      await pool.query(`DROP FUNCTION IF EXISTS "public"."${table}_claim"; DROP TABLE IF EXISTS "public"."${table}"`);
      await pool.end();
    },
  };
});

const MYSQL_URL = 'mysql://root@127.0.0.1:3306/test';
pageOn('MariaDB', !mysqlUp, async () => {
  const pool = createPool({ uri: MYSQL_URL, connectionLimit: 4 });
  const table = name();
  const store = mysqlStore({ pool, table });
  await store.migrate();
  return {
    args: ['--store', MYSQL_URL, '--table', table],
    store,
    close: async () => {
      await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
      await pool.end();
    },
  };
});

pageOn('Redis', !redisUp, async () => {
  const client = new Redis(REDIS.port, REDIS.host, { maxRetriesPerRequest: 1 });
  const prefix = name();
  return {
    args: ['--store', `redis://${REDIS.host}:${REDIS.port}`, '--prefix', prefix],
    store: redisStore({ client, prefix }),
    close: async () => {
      await deleteKeys(client, `${prefix}:*`);
      client.disconnect();
    },
  };
});

// dynalite, started here on a spare port and closed by the test.
pageOn('DynamoDB (dynalite)', false, async () => {
  const db = await startDynalite();
  const table = name();
  // The seeding store's clock runs 6 s behind the page's, past the 5 s clock margin: gone-1's
  // 1 ms lease has ended for the page (abandoned), without a sleep.
  const store = dynamodbStore({ client: withTtlApi(db.client()), table, clock: () => Date.now() - 6_000 });
  await store.migrate();
  return {
    args: ['--store', db.endpoint.replace(/^http:/, 'dynamodb+http:'), '--table', table],
    store,
    close: () => db.close(),
  };
});

describe('idemkit ui: binding, token and headers', () => {
  let dir: string;
  let file: string;
  let db: InstanceType<typeof Database>;
  let store: ReturnType<typeof sqliteStore>;
  const scope = 'alice';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'idemkit-ui-'));
    file = join(dir, 'records.db');
    db = new Database(file);
    store = sqliteStore({ database: db });
    await done(store, { scope, key: 'secret-order' }, '{"card":"4242"}');
  });
  afterAll(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers a store failure with a 500 page naming it (escaped), and keeps serving', async () => {
    let fail = true;
    const admin = {
      ...store.admin,
      list: async (filter?: Parameters<typeof store.admin.list>[0]) => {
        if (fail) throw new StoreUnavailableError('the store is unavailable', { cause: new Error('connect ECONNREFUSED <db>') });
        return store.admin.list(filter);
      },
    };
    const ui = await startUi(admin);
    try {
      const res = await fetch(ui.url);
      expect(res.status).toBe(500);
      const text = await res.text();
      expect(text).toContain('connect ECONNREFUSED &lt;db&gt;');
      expect(text).not.toContain('\n    at ');
      fail = false;
      expect(await (await fetch(ui.url)).text()).toContain('>secret-order</a>');
    } finally {
      await ui.close();
    }
  });

  it('redirects a ?token= login to a path on this site only', async () => {
    const ui = await startUi(store.admin, { token: TOKEN });
    try {
      const res = await rawGet(`${ui.url.replace(/\/$/, '')}//evil.example/?token=${TOKEN}`, {});
      expect(res.status).toBe(303);
      expect(res.headers.location).toMatch(/^\/(?!\/)/);
    } finally {
      await ui.close();
    }
  });

  it('knows the loopback addresses', () => {
    for (const host of ['127.0.0.1', '127.8.9.10', 'localhost', '::1', '[::1]', '::ffff:127.0.0.1']) expect(isLoopback(host)).toBe(true);
    for (const host of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.2', 'example.com', '128.0.0.1']) expect(isLoopback(host)).toBe(false);
  });

  it('refuses a non-loopback --host without --token (exit 2, naming the flag), and a short token', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const io = { out: (t: string) => out.push(t), err: (t: string) => err.push(t) };
    expect(await runUi(['--store', `sqlite:${file}`, '--host', '0.0.0.0'], io, {})).toBe(2);
    expect(err[0]).toMatch(/^idemkit ui: --host 0\.0\.0\.0 is not a loopback address: .*--token T .*is required/);
    expect(out).toEqual([]);
    err.length = 0;
    expect(await runUi(['--store', `sqlite:${file}`, '--host', '0.0.0.0', '--token', 'short'], io, {})).toBe(2);
    expect(err[0]).toMatch(/^idemkit ui: --token: expected at least 16 characters/);
    await expect(startUi(store.admin, { host: '::' })).rejects.toBeInstanceOf(CliUsageError);
  });

  it('reports usage and store problems with exit 2, and prints its help', async () => {
    const lines: string[] = [];
    const io = { out: (t: string) => lines.push(t), err: (t: string) => lines.push(t) };
    expect(await runUi(['--help'], io, {})).toBe(0);
    expect(lines.join('\n')).toMatch(/^Usage: idemkit ui --store URL/);
    lines.length = 0;
    expect(await runUi([], io, {})).toBe(2);
    expect(lines[0]).toMatch(/--store URL is required/);
    lines.length = 0;
    expect(await runUi(['--store', `sqlite:${file}`, '--table', 'no_such_table'], io, {})).toBe(2);
    expect(lines[0]).toMatch(/run `idemkit migrate` first/);
    lines.length = 0;
    expect(await runUi(['--store', `sqlite:${file}`, '--port', '70000'], io, {})).toBe(2);
    expect(lines[0]).toMatch(/--port: expected a port number/);
    lines.length = 0;
    expect(await runUi(['--store', `sqlite:${file}`, 'extra'], io, {})).toBe(2);
  });

  it('without a token, answers only to a loopback Host (no DNS rebinding), with its security headers', async () => {
    const ui = await serve(['--store', `sqlite:${file}`]);
    try {
      const ok = await fetch(ui.url);
      expect(ok.status).toBe(200);
      const csp = ok.headers.get('content-security-policy') ?? '';
      expect(csp).toContain("default-src 'none'");
      expect(csp).toContain("script-src 'self'");
      expect(csp).not.toContain('unsafe-inline');
      expect(csp).toContain("frame-ancestors 'none'");
      expect(ok.headers.get('x-content-type-options')).toBe('nosniff');
      expect(ok.headers.get('referrer-policy')).toBe('no-referrer');
      expect(await ok.text()).toContain('>secret-order</a>');
      const port = new URL(ui.url).port;
      expect((await rawGet(ui.url, { host: `localhost:${port}` })).status).toBe(200);
      const rebound = await rawGet(`${ui.url}api/stats`, { host: `attacker.example:${port}` });
      expect(rebound.status).toBe(403);
      expect(rebound.body).not.toContain('completed');
      expect(ui.output().stdout).toMatch(/^idemkit ui: listening on http:\/\/127\.0\.0\.1:\d+\/ \(read-only; sqlite sqlite:/);
    } finally {
      expect(await ui.stop()).toBe(0);
    }
  });

  it('with a token (here from $IDEMKIT_UI_TOKEN, bound to every address), every request needs it: ?token= once sets an HttpOnly cookie, or a Bearer header', async () => {
    const ui = await serve(['--store', `sqlite:${file}`, '--host', '0.0.0.0'], { IDEMKIT_UI_TOKEN: TOKEN });
    try {
      const base = `http://127.0.0.1:${new URL(ui.url).port}`;
      for (const path of ['/', '/api/stats', `/record?scope=${scope}&key=secret-order`, '/ui.js']) {
        const res = await fetch(`${base}${path}`);
        expect(res.status).toBe(401);
        expect(res.headers.get('www-authenticate')).toBe('Bearer realm="idemkit ui"');
        expect(await res.text()).not.toContain('4242');
      }
      expect((await fetch(`${base}/api/stats`, { headers: { authorization: 'Bearer wrong-token-0123456789' } })).status).toBe(401);
      expect((await fetch(`${base}/?token=wrong-token-0123456789`, { redirect: 'manual' })).status).toBe(401);
      const bearer = await fetch(`${base}/record?scope=${scope}&key=secret-order`, { headers: { authorization: `Bearer ${TOKEN}` } });
      expect(bearer.status).toBe(200);
      expect(await bearer.text()).toContain('4242');
      const login = await fetch(`${base}/record?scope=${scope}&key=secret-order&token=${TOKEN}`, { redirect: 'manual' });
      expect(login.status).toBe(303);
      expect(login.headers.get('location')).toBe(`/record?scope=${scope}&key=secret-order`);
      const cookie = login.headers.get('set-cookie') ?? '';
      expect(cookie).toMatch(new RegExp(`^idemkit_ui_${new URL(ui.url).port}=[\\w-]{43}; Max-Age=${SESSION_MAX_AGE_S}; HttpOnly; SameSite=Strict; Path=/$`));
      expect(cookie).not.toContain(TOKEN);
      const session = cookie.split(';')[0]!;
      const withCookie = await fetch(`${base}/api/stats`, { headers: { cookie: session } });
      expect(withCookie.status).toBe(200);
      expect(((await withCookie.json()) as { completed: number }).completed).toBe(1);
      expect((await fetch(`${base}/api/stats`, { headers: { cookie: `${session}x` } })).status).toBe(401);
      // With a token the Host does not matter (a rebinding page has no cookie for this origin).
      expect((await rawGet(`${base}/`, { host: 'ui.internal.example', cookie: session })).status).toBe(200);
      expect(ui.output().stdout).toContain('every request needs the token');
      expect(ui.output().stdout).not.toContain(TOKEN);
    } finally {
      expect(await ui.stop()).toBe(0);
    }
  });
});

describe('idemkit ui: sessions, and what the start-up line shows', () => {
  let dir: string;
  let db: InstanceType<typeof Database>;
  let store: ReturnType<typeof sqliteStore>;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'idemkit-ui-'));
    db = new Database(join(dir, 'records.db'));
    store = sqliteStore({ database: db });
    await done(store, { scope: 'alice', key: 'secret-order' }, '{"card":"4242"}');
  });
  afterAll(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Logs in with ?token= and answers the cookie's name=value. */
  async function login(base: string): Promise<string> {
    const res = await fetch(`${base}/?token=${TOKEN}`, { redirect: 'manual' });
    expect(res.status).toBe(303);
    return (res.headers.get('set-cookie') ?? '').split(';')[0]!;
  }
  const statsWith = (base: string, cookie: string) => fetch(`${base}/api/stats`, { headers: { cookie } }).then((res) => res.status);

  it('each login gets its own random session, under a cookie named by the port, that no other page or port accepts', async () => {
    const a = await startUi(store.admin, { token: TOKEN });
    const b = await startUi(store.admin, { token: TOKEN });
    try {
      const [baseA, baseB] = [a.url.replace(/\/$/, ''), b.url.replace(/\/$/, '')];
      const [portA, portB] = [new URL(a.url).port, new URL(b.url).port];
      const first = await login(baseA);
      const second = await login(baseA);
      expect(first.startsWith(`idemkit_ui_${portA}=`)).toBe(true);
      expect(second).not.toBe(first);
      expect(await statsWith(baseA, first)).toBe(200);
      expect(await statsWith(baseA, second)).toBe(200);
      const value = first.split('=')[1]!;
      // Another page with the same token does not know this session, under its own name or this one.
      expect(await statsWith(baseB, `idemkit_ui_${portB}=${value}`)).toBe(401);
      expect(await statsWith(baseB, first)).toBe(401);
      // Under another port's name the session is not this page's cookie.
      expect(await statsWith(baseA, `idemkit_ui_${portB}=${value}`)).toBe(401);
      // The value the cookie used to hold, the same for every browser and derived from the token, is refused.
      const derived = createHmac('sha256', TOKEN).update('idemkit ui session').digest('base64url');
      expect(await statsWith(baseA, `idemkit_ui=${derived}`)).toBe(401);
      expect(await statsWith(baseA, `idemkit_ui_${portA}=${derived}`)).toBe(401);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('a session ends after its Max-Age, on the server too', async () => {
    const ui = await startUi(store.admin, { token: TOKEN });
    const base = ui.url.replace(/\/$/, '');
    try {
      const cookie = await login(base);
      expect(await statsWith(base, cookie)).toBe(200);
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(Date.now() + SESSION_MAX_AGE_S * 1000 - 1_000);
      expect(await statsWith(base, cookie)).toBe(200);
      vi.setSystemTime(Date.now() + 2_000);
      expect(await statsWith(base, cookie)).toBe(401);
      // A new login works.
      expect(await statsWith(base, await login(base))).toBe(200);
    } finally {
      vi.useRealTimers();
      await ui.close();
    }
  });

  it('prints the start-up line with control characters in the store URL escaped', async () => {
    const file = join(dir, 'r\x1b]0;pwned\x07\x9b2J.db');
    const hostile = new Database(file);
    sqliteStore({ database: hostile });
    hostile.close();
    const ui = await serve(['--store', `sqlite:${file}`]);
    try {
      const { stdout } = ui.output();
      expect(stdout).not.toMatch(/[^\P{Cc}\n]/u);
      expect(stdout).toMatch(/^idemkit ui: listening on http:\/\/127\.0\.0\.1:\d+\/ \(read-only; sqlite sqlite:\S*r\\x1b\]0;pwned\\x07\\x9b2J\.db, /m);
    } finally {
      expect(await ui.stop()).toBe(0);
    }
  });

  it.skipIf(!pgUp)('shows a PostgreSQL URL without its password= parameters, in the start-up line and the page header', async () => {
    const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
    pool.on('error', () => {});
    const table = name();
    await postgresStore({ pool, table }).migrate();
    // Trust authentication: the server asks for no password, so these are never sent.
    const ui = await serve(['--store', `${PG_URL}?password=Zq9secretW&sslpassword=Zq9secretV`, '--table', table]);
    try {
      const { stdout } = ui.output();
      expect(stdout).toContain(`${PG_URL}?password=***&sslpassword=***, table public.${table})`);
      expect(stdout).not.toContain('Zq9secret');
      const page = await (await fetch(ui.url)).text();
      expect(page).toContain(`<span class="store">${esc(`${PG_URL}?password=***&sslpassword=***`)}, table public.${table}</span>`);
      expect(page).not.toContain('Zq9secret');
    } finally {
      expect(await ui.stop()).toBe(0);
      await pool.query(`DROP FUNCTION IF EXISTS "public"."${table}_claim"; DROP TABLE IF EXISTS "public"."${table}"`);
      await pool.end();
    }
  });

  it('says an unreachable store cannot be reached without any of its credentials', async () => {
    for (const [url, shown] of [
      ['postgres://admin:Zq9secretW@127.0.0.1:1/test?password=Zq9secretV', 'postgres://admin:***@127.0.0.1:1/test?password=***'],
      ['redis://admin:Zq9secretW@127.0.0.1:1/0?password=Zq9secretV', 'redis://admin:***@127.0.0.1:1/0?password=***'],
    ] as const) {
      const lines: string[] = [];
      expect(await runUi(['--store', url], { out: (t) => lines.push(t), err: (t) => lines.push(t) }, {})).toBe(2);
      expect(lines[0]).toContain(`idemkit ui: cannot reach the store at ${shown}: `);
      expect(lines.join('\n')).not.toContain('Zq9secret');
    }
    const lines: string[] = [];
    expect(await runUi(['--store', 'mysql://admin:Zq9/secretW@127.0.0.1:1/test'], { out: (t) => lines.push(t), err: (t) => lines.push(t) }, {})).toBe(2);
    expect(lines[0]).toMatch(/^idemkit ui: the store URL "mysql:\/\/…" is not a valid URL/);
    expect(lines.join('\n')).not.toMatch(/Zq9|secretW/);
  });
});

// ---- in a real browser ----------------------------------------------------------------------

const CHROMIUM = '/usr/bin/chromium';
function requireChromium(): boolean {
  if (existsSync(CHROMIUM)) return true;
  const line = `${CHROMIUM} is missing. Install it with: apt-get install -y chromium`;
  if (process.env.CI === 'true') throw new Error(`CI=true and ${line}`);
  console.warn(`\n!!!!!!!! SKIPPING THE idemkit ui BROWSER TEST: ${line}\n`);
  return false;
}

/** The `idemkit ui` executable, as users run it; resolves once it prints its URL. */
function startUiProcess(args: readonly string[]): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--conditions=idemkit-source', '--import', 'tsx', 'src/cli/main.ts', 'ui', ...args], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /listening on (http:\/\/\S+)/.exec(out);
      if (match) resolve({ url: match[1]!, child });
    });
    child.once('exit', (code) => reject(new Error(`idemkit ui exited with ${code}: ${out}`)));
  });
}

describe.skipIf(!requireChromium())('idemkit ui in Chromium, over a record made through the Hono example', () => {
  let dir: string;
  let example: ChildProcess | undefined;
  let uiChild: ChildProcess | undefined;
  let exampleUrl: string;
  let uiUrl: string;
  const key = `order-${randomBytes(4).toString('hex')}`;
  let file: string;

  const charge = (idempotencyKey: string, fields: Record<string, unknown>, tenant = 'alice') =>
    fetch(`${exampleUrl}/charges`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant}`, 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify(fields),
    });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'idemkit-ui-browser-'));
    file = join(dir, 'idempotency.db');
    ({ url: exampleUrl, child: example } = await startExample('hono', { STORE_URL: `sqlite:${file}` }));
    ({ url: uiUrl, child: uiChild } = await startUiProcess(['--store', `sqlite:${file}`]));
  }, 60_000);
  afterAll(() => {
    for (const child of [example, uiChild]) if (child && child.exitCode === null) process.kill(child.pid!, 'SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  });

  it('shows the record in the list, its stored body in the detail, and counts that update without a reload', async () => {
    const first = await charge(key, { amount: 1200, currency: 'eur', description: 'shown on the page' });
    expect(first.status).toBe(201);
    const created = (await first.json()) as { id: string };
    // A few more, for the screenshot and the counts.
    for (const [i, tenant] of ['alice', 'bob', 'bob'].entries()) expect((await charge(`order-${i}-${randomBytes(3).toString('hex')}`, { amount: 500 + i * 250, currency: 'usd' }, tenant)).status).toBe(201);
    // And two in flight, as a handler still running and one whose owner is gone would leave them.
    const db = new Database(file);
    const store = sqliteStore({ database: db });
    await store.claim({ scope: 'bob', key: 'refund-7c1e' }, 'fp-refund', LIVE);
    await store.claim({ scope: 'carol', key: 'payout-19af' }, 'fp-payout', { leaseMs: 1, windowMs: LIVE.windowMs });
    db.close();
    // A key made to run script if the page ever put it into the document unescaped.
    // (A quoted key may hold spaces; a script in it would show as a dialog, which the test counts.)
    const evil = '<img src=x onerror=alert(document.domain)>';
    expect((await charge(`"${evil}"`, { amount: 1, currency: 'eur' }, 'mallory')).status).toBe(201);

    const { chromium } = await import('playwright-core');
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
    try {
      const page = await browser.newPage({ viewport: { width: 1000, height: 600 } });
      const problems: string[] = [];
      page.on('console', (message) => {
        if (message.type() === 'error') problems.push(message.text());
      });
      page.on('pageerror', (error) => problems.push(error.message));
      page.on('dialog', (dialog) => {
        problems.push(`dialog: ${dialog.message()}`);
        void dialog.dismiss();
      });
      await page.goto(uiUrl);
      const link = page.locator('td.key a', { hasText: key });
      await link.waitFor();
      // The live counts come from /ui.js: it ran under the page's Content-Security-Policy.
      await page.waitForFunction(() => document.querySelector('[data-stat="completed"]')?.textContent === '5');
      expect(await page.locator('[data-stat="inFlight"]').textContent()).toBe('2');
      expect(await page.locator('td.key a', { hasText: '<img src=x' }).textContent()).toBe(evil);
      expect(await page.locator('td.key img').count()).toBe(0);
      // The Lease column: the list's order, each row's lease in words with its time in the tooltip.
      expect(await page.locator('table.records th[aria-sort="ascending"]').textContent()).toBe('Lease');
      const leaseTimes = await page.locator('td.lease').evaluateAll((cells) => cells.map((c) => Date.parse(c.getAttribute('title') ?? '')));
      expect(leaseTimes).toHaveLength(7);
      expect(leaseTimes).toEqual([...leaseTimes].sort((x, y) => x - y));
      expect(await page.locator('tr', { has: page.locator('td.key a', { hasText: 'payout-19af' }) }).locator('td.lease').textContent()).toMatch(/^ended \d\S* ago$/);
      if (process.env.IDEMKIT_UI_SCREENSHOT) {
        mkdirSync(dirname(process.env.IDEMKIT_UI_SCREENSHOT), { recursive: true });
        await page.screenshot({ path: process.env.IDEMKIT_UI_SCREENSHOT });
      }
      // A new record shows in the counts and in the table without a reload (a reload would lose the mark).
      await page.evaluate(() => {
        (window as unknown as { notReloaded?: boolean }).notReloaded = true;
      });
      const late = `order-late-${randomBytes(3).toString('hex')}`;
      expect((await charge(late, { amount: 1, currency: 'eur' })).status).toBe(201);
      await page.waitForFunction(() => document.querySelector('[data-stat="completed"]')?.textContent === '6', undefined, { timeout: 30_000 });
      await page.locator('td.key a', { hasText: late }).waitFor({ timeout: 30_000 });
      expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
      expect(await page.locator('td.lease').count()).toBe(8);
      // The refreshed table is escaped as the first was.
      expect(await page.locator('td.key a', { hasText: '<img src=x' }).textContent()).toBe(evil);
      expect(await page.locator('td.key img').count()).toBe(0);

      await link.click();
      await page.waitForURL(/\/record\?/);
      const body = page.locator('pre.body');
      await body.waitFor();
      const text = await body.textContent();
      expect(JSON.parse(text ?? '')).toEqual({ id: created.id, amount: 1200, currency: 'eur', description: 'shown on the page' });
      expect(await page.locator('code.key').textContent()).toBe(key);
      expect(await page.locator('b.status').textContent()).toBe('201');
      expect(problems).toEqual([]);
    } finally {
      await browser.close();
    }
  }, 90_000);
});
