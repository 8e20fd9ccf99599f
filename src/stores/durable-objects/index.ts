/**
 * `idemkit/stores/durable-objects`: the store on Cloudflare Durable Objects, for a Worker
 * (store.ts, the Worker's side; object.ts, the object that keeps one shard's records in its
 * SQLite storage; wire.ts, what they say to each other).
 */
export type { DurableObjectStore, DurableObjectStoreOptions } from './store.js';
export { durableObjectStore } from './store.js';
export { IdempotencyObject } from './object.js';
