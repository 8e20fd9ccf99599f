/**
 * The Durable Object store in workerd (issue 31, item 4): the Hono adapter on a Worker in front of
 * `durableObjectStore`, answering the decision matrix's cases and a same-key race with one
 * execution; the object's alarm ending a window; and the store contract, driven from here through
 * the test Worker (durable-objects/bridge.ts), every section but admin (the store has no admin view).
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeStoreContract } from './contract.js';
import { bridgeStore } from './durable-objects/bridge.js';
import type { Workerd } from './durable-objects/workerd.js';
import { startWorkerd } from './durable-objects/workerd.js';

let workerd: Workerd;

beforeAll(async () => {
  workerd = await startWorkerd();
}, 60_000);

afterAll(async () => {
  await workerd?.stop();
});

const charge = (key: string, amount: number, headers: Record<string, string> = {}) =>
  fetch(`${workerd.url}/charges`, { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json', ...headers }, body: JSON.stringify({ amount }) });

const executions = async (key: string) => (await (await fetch(`${workerd.url}/executions?key=${encodeURIComponent(key)}`)).json()) as { n: number; held: boolean };

describe('Hono on a Worker with the Durable Object store, in workerd', () => {
  it('runs a new key once (201), replays it with Idempotent-Replayed, and answers 422 to the same key with another body', async () => {
    const key = randomUUID();
    const first = await charge(key, 100);
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const body = await first.text();
    const replay = await charge(key, 100);
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.text()).toBe(body);
    const other = await charge(key, 999);
    expect(other.status).toBe(422);
    expect(other.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect((await executions(key)).n).toBe(1);
  });

  it('answers 409 with Retry-After while the first request is in flight, then replays its answer', async () => {
    const key = randomUUID();
    const first = charge(key, 5, { 'x-hold': '1' });
    // Until the handler runs, the claim is made (it is claimed before the handler starts).
    for (let i = 0; i < 200 && !(await executions(key)).held; i++) await sleep(10);
    expect((await executions(key)).held).toBe(true);
    const second = await charge(key, 5);
    expect(second.status).toBe(409);
    expect(Number(second.headers.get('retry-after'))).toBeGreaterThanOrEqual(0);
    expect(second.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    await fetch(`${workerd.url}/open?key=${encodeURIComponent(key)}`, { method: 'POST' });
    const done = await first;
    expect(done.status, workerd.output()).toBe(201);
    const replay = await charge(key, 5);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.text()).toBe(await done.text());
    expect((await executions(key)).n).toBe(1);
  });

  it('runs the handler once for 50 concurrent requests with one key', async () => {
    const key = randomUUID();
    const answers = await Promise.all(Array.from({ length: 50 }, () => charge(key, 7, { 'x-delay': '50' })));
    expect((await executions(key)).n).toBe(1);
    const statuses = answers.map((r) => (r.status === 201 && r.headers.get('idempotent-replayed') === 'true' ? 'replay' : String(r.status)));
    expect(statuses.filter((s) => s === '201')).toHaveLength(1);
    expect(statuses.every((s) => s === '201' || s === '409' || s === 'replay')).toBe(true);
    for (const r of answers) await r.arrayBuffer();
  });

  it('the object’s alarm deletes a record once its window (and grace) is over, with no reap', async () => {
    const store = await bridgeStore(workerd.url, 0);
    const ref = { scope: 'alarm', key: randomUUID() };
    const claim = await store.claim(ref, 'fp', { leaseMs: 100, windowMs: 200 });
    expect(claim.kind).toBe('acquired');
    if (claim.kind !== 'acquired') return;
    await store.complete(ref, claim.token, { status: 201, headers: [], body: new Uint8Array([1]), bodyOmitted: false });
    expect((await store.get(ref))?.state).toBe('completed');
    let gone = false;
    for (let i = 0; i < 100 && !gone; i++) {
      await sleep(50);
      gone = (await store.get(ref)) === undefined;
    }
    expect(gone).toBe(true);
  });
});

describeStoreContract('durable-objects (workerd)', async () => ({ store: await bridgeStore(workerd.url), advance: (ms) => sleep(ms) }));
