/**
 * The Redis store on a throwaway 3-master Redis Cluster (started on spare ports from the
 * machine's redis-server, stopped by pid afterwards) against the reference model. How time
 * moves: redis-harness.ts (real time, short units, at most two sleeps per run).
 */
import { Cluster } from 'ioredis';
import { describe } from 'vitest';
import { requireRedisBinaries, startRedisCluster } from '../../support/redis-servers.js';
import { redisHarness } from './redis-harness.js';
import { itMatchesTheModel } from './run.js';

const binaries = requireRedisBinaries();

describe.skipIf(!binaries)('model-based: redis store on a Redis Cluster', () => {
  itMatchesTheModel(
    'redis cluster',
    async () => {
      const cluster = await startRedisCluster(3);
      try {
        const client = new Cluster([...cluster.nodes], { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } });
        client.on('error', () => {});
        await new Promise<void>((resolve, reject) => {
          client.once('ready', resolve);
          client.once('end', () => reject(new Error('the cluster client gave up connecting')));
        });
        return redisHarness('redis cluster', client, async () => {
          client.disconnect();
          await cluster.stop();
        });
      } catch (error) {
        await cluster.stop();
        throw error;
      }
    },
    { runs: 8 },
  );
});
