/**
 * The Redis store (the shared server on 6379) against the reference model. How time moves:
 * redis-harness.ts (real time, short units, at most two sleeps per run).
 */
import { describe } from 'vitest';
import { connectStoreClient } from '../../support/redis-servers.js';
import { REDIS, requireService } from '../../support/services.js';
import { redisHarness } from './redis-harness.js';
import { itMatchesTheModel } from './run.js';

const up = await requireService(REDIS);

describe.skipIf(!up)('model-based: redis store', () => {
  itMatchesTheModel(
    'redis',
    async () => {
      const client = await connectStoreClient(REDIS.port);
      return redisHarness('redis', client, () => void client.disconnect());
    },
    { runs: 10 },
  );
});
