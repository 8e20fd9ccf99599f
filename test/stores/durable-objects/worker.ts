/**
 * The Worker the Durable Object tests run in workerd (bundled by esbuild at test time, workerd.ts):
 * the Hono adapter in front of `durableObjectStore`, a handler that counts its executions and can
 * be held in flight (`x-hold`, until `/open`) or slowed (`x-delay`), and `/__store/<op>`, which runs one store operation for the contract suite
 * driven from Node (bridge.ts).
 */
import { Hono } from 'hono';
import type { MiddlewareHandler } from 'hono';
import { idempotency } from '../../../src/http/hono.js';
import type { DurableObjectStoreOptions } from '../../../src/stores/durable-objects/index.js';
import { durableObjectStore, IdempotencyObject } from '../../../src/stores/durable-objects/index.js';
import type { WireResponse } from '../../../src/stores/durable-objects/wire.js';
import { fromWireResponse, toWireResponse } from '../../../src/stores/durable-objects/wire.js';
import type { IdempotencyStore, StoredResponse } from '../../../src/core/store.js';

export { IdempotencyObject };

interface Env {
  readonly IDEMPOTENCY: DurableObjectStoreOptions['namespace'];
}

/** Executions per idempotency key, in this isolate (workerd runs the Worker in one). */
const executions = new Map<string, number>();
/**
 * Keys whose handler is held in flight, until `/open` deletes them. The held handler polls on a
 * timer: a promise resolved by another request would be a cross-request promise, which workerd
 * cancels as a hung request.
 */
const held = new Set<string>();

let idem: MiddlewareHandler | undefined;
const stores = new Map<string, IdempotencyStore>();
/** One store per grace, so a test can watch the alarm delete a record. */
const storeFor = (env: Env, graceMs = 60_000) => {
  let store = stores.get(String(graceMs));
  if (store === undefined) stores.set(String(graceMs), (store = durableObjectStore({ namespace: env.IDEMPOTENCY, shards: 4, graceMs, maxResponseBytes: 64 * 1024 })));
  return store;
};

const app = new Hono<{ Bindings: Env }>();

app.post('/charges', (c, next) => (idem ??= idempotency({ store: storeFor(c.env), scope: () => 'tenant-1' }) as MiddlewareHandler)(c, next), async (c) => {
  const key = c.req.header('idempotency-key') ?? '';
  executions.set(key, (executions.get(key) ?? 0) + 1);
  // Headers, not the query: the path with its query is part of the fingerprint.
  if (c.req.header('x-hold') !== undefined) {
    held.add(key);
    while (held.has(key)) await new Promise((resolve) => setTimeout(resolve, 10));
  } else await new Promise((resolve) => setTimeout(resolve, Number(c.req.header('x-delay') ?? 0)));
  const body = (await c.req.json()) as { amount: number };
  return c.json({ id: crypto.randomUUID(), amount: body.amount }, 201);
});

app.get('/executions', (c) => {
  const key = c.req.query('key') ?? '';
  return c.json({ n: executions.get(key) ?? 0, held: held.has(key) });
});

app.post('/open', (c) => {
  const key = c.req.query('key') ?? '';
  held.delete(key);
  return c.json({ opened: true });
});

type Args = readonly unknown[];

/** One store operation, its answer made JSON (bodies in base64), an error sent back by its code. */
app.post('/__store/:op', async (c) => {
  const { args, graceMs } = (await c.req.json()) as { args: Args; graceMs?: number };
  const store = storeFor(c.env, graceMs) as IdempotencyStore & Record<string, (...a: unknown[]) => Promise<unknown>>;
  const op = c.req.param('op');
  try {
    const given = op === 'complete' ? [args[0], args[1], fromWireResponse(args[2] as WireResponse)] : args;
    const result = op === 'maxResponseBytes' ? store.maxResponseBytes : await store[op]!(...given);
    return c.json({ result: encode(result) ?? null });
  } catch (e) {
    const error = e as Error & { code?: string; field?: string };
    return c.json({ error: { name: error.name, code: error.code, field: error.field, message: error.message } });
  }
});

/** Uint8Array bodies of responses, claims and records as base64 (wire.ts). */
function encode(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map(encode);
  const object = value as Record<string, unknown>;
  if ('status' in object && 'bodyOmitted' in object) return toWireResponse(object as unknown as StoredResponse);
  return Object.fromEntries(Object.entries(object).map(([k, v]) => [k, encode(v)]));
}

export default app;
