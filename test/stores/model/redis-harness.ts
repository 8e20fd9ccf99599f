/**
 * The harness of the Redis stores (standalone and Cluster).
 *
 * Time jumps: the scripts decide on the server's `TIME`, which cannot be set, and a record's TTL
 * runs on the same clock; moving stored deadlines back (as the PostgreSQL harness does) would
 * mean rewriting the record format and its TTL from the test. So real time passes: a unit is
 * 200 ms, a jump sleeps its units, and a run makes at most two jumps. A run whose commands fall
 * behind by a unit (a loaded machine) is discarded, not failed (see `inStep`).
 */
import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { redisStore } from '../../../src/stores/redis.js';
import { deleteKeys } from '../../support/redis-servers.js';
import type { ModelHarness } from './harness.js';
import { RealTimeline } from './harness.js';

export const REDIS_UNIT_MS = 200;

export function redisHarness(name: string, client: Redis | Cluster, close: () => Promise<void> | void): ModelHarness {
  const run = `idemkit-model-${randomUUID().slice(0, 8)}`;
  const time = new RealTimeline(REDIS_UNIT_MS);
  const masters = () => ('nodes' in client && typeof client.nodes === 'function' ? client.nodes('master') : [client as Redis]);
  let runs = 0;
  return {
    name,
    unitMs: REDIS_UNIT_MS,
    exactClock: false,
    maxJumps: 2,
    async reset() {
      // A prefix per run: the store's reap scans its own prefix only, so it sees this run's records alone.
      const prefix = `${run}-${runs++}`;
      time.restart();
      return redisStore({ client, prefix, maxResponseBytes: 64 });
    },
    advance: (ms) => time.sleep(ms),
    storeTime: (virtualMs) => time.storeTime(virtualMs),
    inStep: () => time.inStep(),
    async close() {
      for (const node of masters()) await deleteKeys(node, `${run}-*`);
      await close();
    },
  };
}
