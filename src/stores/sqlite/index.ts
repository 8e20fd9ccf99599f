/**
 * `idemkit/stores/sqlite`: the embedded store on SQLite: better-sqlite3, node:sqlite or bun:sqlite (store.ts; its admin in admin.ts).
 * The database it takes is structural (src/drivers/sqlite.ts): the application passes its own.
 */
export type { SqliteStore, SqliteStoreOptions } from './store.js';
export { sqliteStore } from './store.js';
