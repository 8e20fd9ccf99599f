/**
 * The harness of the Redis stores (standalone and Cluster).
 *
 * Time jumps: the scripts decide on the server's `TIME`, which cannot be set, and a record's TTL
 * runs on the same clock; moving stored deadlines back (as the PostgreSQL harness does) would
 * mean rewriting the record format and its TTL from the test. So real time passes: a unit is
 * 200 ms, and a jump sleeps until the deadlines it passes have passed (at most a few units), at
 * most two jumps a run. A run whose commands outlast a lease the model holds live (a loaded
 * machine) is discarded, not failed (see `inStep` in commands.ts).
 */
import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { RedisStoreOptions } from '../../../src/stores/redis/index.js';
import { redisStore } from '../../../src/stores/redis/index.js';
import { deleteKeys } from '../../support/redis-servers.js';
import type { ModelHarness } from './harness.js';
import { waitPast } from './harness.js';

export const REDIS_UNIT_MS = 200;

/** `client` is the store's (ioredis or node-redis); `admin`, an ioredis client of the same server or Cluster, deletes the run's keys. */
export function redisHarness(name: string, client: RedisStoreOptions['client'], admin: Redis | Cluster, close: () => Promise<void> | void): ModelHarness {
  const run = `idemkit-model-${randomUUID().slice(0, 8)}`;
  const masters = () => ('nodes' in admin && typeof admin.nodes === 'function' ? admin.nodes('master') : [admin as Redis]);
  let runs = 0;
  return {
    name,
    unitMs: REDIS_UNIT_MS,
    exactClock: false,
    transactional: false,
    keepsNul: true,
    maxJumps: 2,
    async reset() {
      // A prefix per run: the store's reap scans its own prefix only, so it sees this run's records alone.
      const prefix = `${run}-${runs++}`;
      return redisStore({ client, prefix, maxResponseBytes: 64 });
    },
    clock: () => Date.now(),
    advance: (_ms, model) => waitPast(model),
    async close() {
      for (const node of masters()) await deleteKeys(node, `${run}-*`);
      await close();
    },
  };
}
