/**
 * `idemkit/stores/postgres`: the store on node-postgres (store.ts; its statements in sql.ts, its
 * admin in admin.ts). The pool it takes is structural (src/drivers/postgres.ts): the application
 * passes its own, and `TxOf<typeof store>` names its transaction's client.
 */
export { postgresSchemaSql } from './sql.js';
export type { PostgresStore, PostgresStoreOptions } from './store.js';
export { postgresStore } from './store.js';
