/** `idemkit/stores/memory`: the single-process store for tests and development (store.ts; its admin in admin.ts). */
export type { MemoryStore, MemoryStoreOptions } from './store.js';
export { memoryStore } from './store.js';
