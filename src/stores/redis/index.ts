/**
 * `idemkit/stores/redis`: the store on ioredis or node-redis 5/6 (store.ts; the client resolved
 * in client.ts, its scripts in lua.ts, its record encoding in record.ts, its admin in admin.ts).
 * The client it takes is structural: the application passes its own ioredis `Redis` or
 * `Cluster`, or node-redis `createClient()` or `createCluster()`.
 */
export type { RedisStore, RedisStoreOptions } from './store.js';
export { redisStore } from './store.js';
