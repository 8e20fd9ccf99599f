/**
 * The protected service of the network-fault suite, run inside the namespace. Environment as
 * test/proof/server.ts (STORE_URL, NAME, TRANSACTIONAL, LEASE_MS, STORE_TIMEOUT_MS, UNIQUE_ORDERS,
 * ORDERS_FILE) plus HOST, the address to listen on. `POST /work` inserts one order. Two holds let
 * the test cut the store link at an exact point, each told to the parent over IPC:
 * - `x-park: 1`: after the order, the handler sends `{ parked: key }` and waits for `{ release: key }`
 *   (between the effect and the completion);
 * - `x-hold-last-write: 1`: the request's last store write (the commit in transactional mode, the
 *   completion without) sends `{ writing: key }` and waits for `{ write: key }` before it goes out.
 * IPC runs over a pipe, not the network: the control path stays up whatever the link does.
 */
import Fastify from 'fastify';
import type { IdempotencyStore, RecordRef, StoredResponse, TransactionalStore } from '../../src/core/store.js';
import { idempotency } from '../../src/http/fastify.js';
import { openBackend } from '../proof/backends.js';

const env = process.env;
const transactional = env.TRANSACTIONAL === '1';
const backend = await openBackend(env.STORE_URL!, env.NAME!, { uniqueOrders: env.UNIQUE_ORDERS === '1', ordersFile: env.ORDERS_FILE, connectTimeoutMs: 1_000 });
const releases = new Map<string, () => void>();
const writes = new Map<string, () => void>();
process.on('message', (message: { release?: string; write?: string }) => {
  if (message.release) releases.get(message.release)?.();
  if (message.write) writes.get(message.write)?.();
});
// The parent is gone (its test run ended): nothing may outlive it.
process.on('disconnect', () => process.exit(0));

/** Keys whose last store write waits for the parent. */
const holdLastWrite = new Set<string>();
async function heldWrite(key: string | undefined): Promise<void> {
  if (key === undefined || !holdLastWrite.delete(key)) return;
  const go = new Promise<void>((resolve) => writes.set(key, resolve));
  process.send!({ writing: key });
  await go;
  writes.delete(key);
}

/** The backend's store, with the hold before its last write; everything else passes through. */
function holding(store: IdempotencyStore): IdempotencyStore {
  if (!transactional) {
    return { ...store, complete: async (ref: RecordRef, token: string, response: StoredResponse) => (await heldWrite(ref.key), store.complete(ref, token, response)) };
  }
  const inner = store as TransactionalStore;
  const wrapped: TransactionalStore = {
    ...inner,
    async beginTransaction() {
      const transaction = await inner.beginTransaction();
      let key: string | undefined;
      return {
        ...transaction,
        tx: transaction.tx,
        complete: (ref: RecordRef, token: string, response: StoredResponse) => ((key = ref.key), transaction.complete(ref, token, response)),
        commit: async () => (await heldWrite(key), transaction.commit()),
      };
    },
  };
  return wrapped;
}

const app = Fastify();
await app.register(idempotency, {
  store: holding(backend.store),
  transactional,
  leaseMs: Number(env.LEASE_MS),
  storeTimeoutMs: Number(env.STORE_TIMEOUT_MS),
  scope: () => 'proof',
});
app.post('/work', async (request, reply) => {
  const ctx = request.idempotency!;
  if (request.headers['x-hold-last-write'] === '1') holdLastWrite.add(ctx.key);
  await backend.insertOrder(ctx.tx, ctx.key);
  if (request.headers['x-park'] === '1') {
    const released = new Promise<void>((resolve) => releases.set(ctx.key, resolve));
    process.send!({ parked: ctx.key });
    await released;
    releases.delete(ctx.key);
  }
  return reply.code(201).send({ key: ctx.key, pid: process.pid });
});
await app.listen({ port: 0, host: env.HOST! });
console.log(`listening ${(app.server.address() as { port: number }).port}`);
