/**
 * Every quickstart example the README shows, started the way `npm run example:<name>` starts it,
 * with each store it accepts, and driven over HTTP.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Service } from './support/services.js';
import { MARIADB, POSTGRES, REDIS, requireService } from './support/services.js';
import { startExample } from './support/examples.js';

const root = join(import.meta.dirname, '..');
const examples = ['web', 'hono', 'express', 'fastify', 'koa', 'nest'];
const dir = mkdtempSync(join(tmpdir(), 'idemkit-examples-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const post = (url: string, key: string | undefined, body: unknown, token = 'alice') =>
  fetch(`${url}/charges`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

const serverStores: Array<[string, string, Service]> = [
  ['postgres', 'postgres://postgres@127.0.0.1:5432/test', POSTGRES],
  ['redis', 'redis://127.0.0.1:6379/0', REDIS],
  ['mysql', 'mysql://root@127.0.0.1:3306/test', MARIADB],
];
const storeUrls: Record<string, string> = { memory: 'memory:' };
for (const [kind, url, service] of serverStores) if (await requireService(service)) storeUrls[kind] = url;

describe.each(examples.flatMap((name) => ['sqlite', ...Object.keys(storeUrls)].map((kind) => [name, kind])))('example %s with the %s store', (name, storeKind) => {
  let url: string;
  let child: ChildProcess;
  beforeAll(async () => {
    const STORE_URL = storeUrls[storeKind] ?? `sqlite:${join(dir, `${name}.db`)}`;
    ({ url, child } = await startExample(name, { STORE_URL, DELAY_MS: '400' }));
  }, 30_000);
  afterAll(() => {
    if (child.exitCode === null) process.kill(child.pid!, 'SIGKILL');
  });

  it('creates a charge once and replays it', async () => {
    const key = randomUUID();
    const first = await post(url, key, { amount: 1200, currency: 'eur' });
    expect(first.status).toBe(201);
    const created = await first.json();
    expect(created).toMatchObject({ amount: 1200, currency: 'eur' });
    expect(created.id).toMatch(/^[0-9a-f-]{36}$/);
    const again = await post(url, key, { currency: 'eur', amount: 1200 });
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.json()).toEqual(created);
  });

  it('answers 409 to a concurrent duplicate (DELAY_MS) and 422 to a changed body', async () => {
    // Two requests sent together overlap by the 400 ms handler, unless a loaded machine delays the
    // second past the first's end: then it is a replay, and the pair proves nothing about 409.
    // Such a pair is tried again with a new key (a few times); a second execution fails at once.
    const outcomes: string[] = [];
    let key = '';
    for (let round = 0; round < 5 && !outcomes.includes('201 409'); round++) {
      key = randomUUID();
      const [a, b] = await Promise.all([post(url, key, { amount: 1 }), post(url, key, { amount: 1 })]);
      const answers = [a, b].map((r) => `${r.status}${r.headers.get('idempotent-replayed') === 'true' ? ' replayed' : ''}`).sort();
      outcomes.push(answers.join(' '));
      // Never two executions: the other answer is a 409 or a replay.
      expect(answers).toContainEqual(expect.stringMatching(/^(409|201 replayed)$/));
    }
    expect(outcomes).toContain('201 409');
    expect((await post(url, key, { amount: 2 })).status).toBe(422);
  });

  it('answers 400 without a key, 401 without a token, and keeps tenants apart', async () => {
    expect((await post(url, undefined, { amount: 1 })).status).toBe(400);
    expect((await fetch(`${url}/charges`, { method: 'POST', body: '{}' })).status).toBe(401);
    const key = randomUUID();
    const alice = await (await post(url, key, { amount: 1 }, 'alice')).json();
    const bob = await (await post(url, key, { amount: 1 }, 'bob')).json();
    expect(alice.id).not.toBe(bob.id);
  });

  it.runIf(name === 'web')('answers a GET (which the middleware passes through) with 405 and Allow: POST, as a route would', async () => {
    for (const key of [undefined, randomUUID()]) {
      const get = await fetch(`${url}/charges`, { headers: { authorization: 'Bearer alice', ...(key ? { 'idempotency-key': key } : {}) } });
      expect(get.status).toBe(405);
      expect(get.headers.get('allow')).toBe('POST');
      expect(get.headers.get('idempotent-replayed')).toBeNull();
    }
  });

  it('does not store a rejected body: the key is reusable after a 400', async () => {
    const key = randomUUID();
    const rejected = await post(url, key, 'not json');
    expect(rejected.status).toBe(400);
    // JSON, never an HTML error page or a stack trace (Express's default error handler sends both).
    const text = await rejected.text();
    expect(rejected.headers.get('content-type')).toMatch(name === 'express' ? /^application\/problem\+json$/ : /json/);
    expect(text).not.toMatch(/<html|<pre|\bat [\w.<>]+ \(|node_modules/i);
    expect((await post(url, key, { amount: 3 })).status).toBe(201);
  });
});

it('npm run demo (the payments acceptance run) reconciles and exits 0', async () => {
  const child = spawn(process.execPath, ['--conditions=idemkit-source', '--import', 'tsx', 'examples/payments/demo.ts', '--orders', '40', '--concurrency', '8'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  expect(out).toMatch(/^PASS: 40 orders/m);
  expect(out).not.toContain('FAIL');
  expect(code).toBe(0);
}, 180_000);
