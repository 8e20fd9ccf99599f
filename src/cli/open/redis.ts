// Opens a Redis (or Redis Cluster) store for the store commands: one connection that fails fast,
// made before the store so that an unreachable server is named with its own reason.
import type { RedisBufferClient } from '../../drivers/redis.js';
import type { StoreNames, StoreUrl } from '../store-url.js';
import { scrub } from '../store-url.js';
import type { OpenedStore } from './driver.js';
import { CONNECT_TIMEOUT_MS, Unreachable, flagError, importDriver, refuseNames } from './driver.js';

// What the CLI uses of ioredis, declared here so that nothing imports the driver's types.
type IoredisClient = RedisBufferClient & { connect(): Promise<void>; disconnect(): void; on(event: 'error', listener: (error: Error) => void): unknown };
interface IoredisModule {
  Redis: new (url: string, options: object) => IoredisClient;
  Cluster: new (nodes: Array<{ host: string; port: number }>, options: object) => IoredisClient;
}

export async function openRedis(url: StoreUrl, names: StoreNames): Promise<OpenedStore> {
  refuseNames(url, names, ['prefix']);
  const ioredis = await importDriver<IoredisModule>('redis');
  const { redisStore } = await import('../../stores/redis/index.js');
  // Fail fast: no offline queue, no retries; a command on a dead connection errors at once.
  const common = { enableOfflineQueue: false, maxRetriesPerRequest: 0, connectTimeout: CONNECT_TIMEOUT_MS, lazyConnect: true } as const;
  const client = url.clusterNodes
    ? new ioredis.Cluster([...url.clusterNodes], { lazyConnect: true, enableOfflineQueue: false, clusterRetryStrategy: () => null, redisOptions: common })
    : new ioredis.Redis(url.target, { ...common, retryStrategy: () => null });
  // ioredis rejects connect() with "Connection is closed."; the reason came in an 'error' event.
  let reason: Error | undefined;
  client.on('error', (error: Error) => {
    reason ??= error;
  });
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw new Unreachable(`cannot reach the store at ${url.shown}: ${scrub((reason ?? (error as Error)).message || String(error), url)}`);
  }
  let store;
  try {
    store = redisStore({ client, prefix: names.prefix, coalesceWrites: false });
  } catch (error) {
    client.disconnect();
    throw flagError(error);
  }
  const prefix = names.prefix ?? 'idemkit';
  return {
    url,
    store,
    where: `prefix ${prefix}`,
    async migrate() {
      return { created: [], present: [], added: [] };
    },
    async verify() {},
    async close() {
      client.disconnect();
    },
  };
}
