/** `idemkit/stores/sqlite`: the embedded store on better-sqlite3 (store.ts; its admin in admin.ts). */
export type { SqliteDatabase, SqliteStatement } from '../../drivers/sqlite.js';
export type { SqliteStore, SqliteStoreOptions } from './store.js';
export { sqliteStore } from './store.js';
