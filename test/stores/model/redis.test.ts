/**
 * The Redis store (the shared server on 6379) against the reference model. How time moves:
 * redis-harness.ts (real time, short units, at most two sleeps per run).
 */
import { describe } from 'vitest';
import { STORE_CLIENT_LIBRARIES, connectStoreClient, connectStoreClientOf } from '../../support/redis-servers.js';
import { REDIS, requireService } from '../../support/services.js';
import { redisHarness } from './redis-harness.js';
import { itMatchesTheModel } from './run.js';

const up = await requireService(REDIS);

for (const library of STORE_CLIENT_LIBRARIES) {
  describe.skipIf(!up)(`model-based: redis store through ${library}`, () => {
    itMatchesTheModel(
      `redis through ${library}`,
      async () => {
        const connected = await connectStoreClientOf(library, REDIS.port);
        const admin = await connectStoreClient(REDIS.port);
        return redisHarness(`redis through ${library}`, connected.client, admin, () => {
          connected.close();
          admin.disconnect();
        });
      },
      { runs: 10 },
    );
  });
}
