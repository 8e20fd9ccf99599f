/** `idemkit/stores/memory`: the single-process store for tests and development (store.ts; its admin in admin.ts). */
export type { MemoryStore, MemoryStoreOptions, MemoryStoreStats } from './store.js';
export { DEFAULT_MEMORY_MAX_BYTES, MEMORY_RECORD_OVERHEAD_BYTES, memoryStore } from './store.js';
