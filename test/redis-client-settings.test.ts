/**
 * Issue 26 item 14, follow-up: `redisStore` warns once per client whose ioredis settings would
 * queue commands offline or resend them without limit. The Redis clients this repository makes
 * for its stores (the quickstarts' examples/store.ts, the proof and network-fault backend, the
 * bench) use the settings docs/stores/redis.md recommends, so none of them prints that warning:
 * a README quickstart user does not meet it, and a warning in the test log is a real one.
 */
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { openBenchStore } from '../bench/stores.js';
import { storeFromUrl } from '../examples/store.js';
import { REDIS_URL, openBackend } from './proof/backends.js';
import { REDIS, requireService } from './support/services.js';

const hasRedis = await requireService(REDIS);

describe.skipIf(!hasRedis)('the Redis clients made for stores use the recommended settings', () => {
  let warnings: string[];
  let clients: Redis[];
  beforeEach(() => {
    warnings = [];
    clients = [];
    vi.spyOn(console, 'warn').mockImplementation((...args: unknown[]) => void warnings.push(args.map(String).join(' ')));
    // Every client connects (explicitly, or by itself without lazyConnect): remembered, to disconnect it.
    const connect = Redis.prototype.connect;
    vi.spyOn(Redis.prototype, 'connect').mockImplementation(function (this: Redis, ...args: Parameters<Redis['connect']>) {
      clients.push(this);
      return connect.apply(this, args);
    });
  });
  afterEach(() => {
    vi.restoreAllMocks();
    for (const client of clients) client.disconnect();
  });

  const settingsOf = (client: Redis) => ({ enableOfflineQueue: client.options.enableOfflineQueue, maxRetriesPerRequest: client.options.maxRetriesPerRequest });
  const recommended = { enableOfflineQueue: false, maxRetriesPerRequest: 0 };

  it('examples/store.ts (every quickstart with STORE_URL=redis://…): no warning, and the store answers', async () => {
    const store = await storeFromUrl(REDIS_URL);
    expect(warnings.filter((line) => line.includes('redisStore()'))).toEqual([]);
    expect(clients.map(settingsOf)).toEqual([recommended]);
    expect(await store.get({ scope: 'settings-test', key: 'none' })).toBeUndefined();
  });

  it('test/proof/backends.ts (the proofs and the network-fault suite): no warning, and the store answers', async () => {
    const backend = await openBackend(REDIS_URL, `settings_${process.pid}`, { ordersFile: ':memory:' });
    try {
      expect(warnings.filter((line) => line.includes('redisStore()'))).toEqual([]);
      expect(clients.map(settingsOf)).toEqual([recommended]);
      expect(await backend.store.get({ scope: 'settings-test', key: 'none' })).toBeUndefined();
    } finally {
      await backend.drop();
      await backend.close();
    }
  });

  it('bench/stores.ts (the Redis the bench measures): no warning, and the store answers', async () => {
    const bench = await openBenchStore('redis');
    try {
      expect(warnings.filter((line) => line.includes('redisStore()'))).toEqual([]);
      expect(clients.map(settingsOf)).toEqual([recommended]);
      expect(await bench.store.get({ scope: 'settings-test', key: 'none' })).toBeUndefined();
    } finally {
      await bench.close();
    }
  });
});
