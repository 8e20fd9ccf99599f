/**
 * The Redis store on a throwaway 3-master Redis Cluster (started on spare ports from the
 * machine's redis-server, stopped by pid afterwards) against the reference model. How time
 * moves: redis-harness.ts (real time, short units, at most two sleeps per run).
 */
import { describe } from 'vitest';
import { STORE_CLIENT_LIBRARIES, connectIoredisCluster, connectNodeRedisCluster, requireRedisBinaries, startRedisCluster } from '../../support/redis-servers.js';
import { redisHarness } from './redis-harness.js';
import { itMatchesTheModel } from './run.js';

const binaries = requireRedisBinaries();

for (const library of STORE_CLIENT_LIBRARIES) {
  describe.skipIf(!binaries)(`model-based: redis store on a Redis Cluster through ${library}`, () => {
    itMatchesTheModel(
      `redis cluster through ${library}`,
      async () => {
        const cluster = await startRedisCluster(3);
        try {
          const admin = await connectIoredisCluster(cluster.nodes);
          const nodeRedis = library === 'node-redis' ? await connectNodeRedisCluster(cluster.nodes) : undefined;
          return redisHarness(`redis cluster through ${library}`, nodeRedis ?? admin, admin, async () => {
            nodeRedis?.destroy();
            admin.disconnect();
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
}
