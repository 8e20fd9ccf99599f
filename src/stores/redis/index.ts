/**
 * `idemkit/stores/redis`: the store on ioredis (store.ts; its scripts in lua.ts, its record
 * encoding in record.ts, its admin in admin.ts). The client it takes is structural: the
 * application passes its own `Redis` or `Cluster`.
 */
export type { RedisStore, RedisStoreOptions } from './store.js';
export { redisStore } from './store.js';
