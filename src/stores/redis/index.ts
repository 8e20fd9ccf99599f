/** `idemkit/stores/redis`: the store on ioredis (store.ts; its scripts in lua.ts, its record encoding in record.ts, its admin in admin.ts). */
export type { RedisArgument } from '../../drivers/redis.js';
export type { RedisClient, RedisCommandClient, RedisStore, RedisStoreOptions } from './store.js';
export { keySlot, redisRecordKey, redisStore } from './store.js';
