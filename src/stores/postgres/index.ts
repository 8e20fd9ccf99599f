/** `idemkit/stores/postgres`: the store on node-postgres (store.ts; its statements in sql.ts, its admin in admin.ts). */
export type { PostgresClient, PostgresPool, PostgresQueryResult } from '../../drivers/postgres.js';
export { postgresSchemaSql } from './sql.js';
export type { PoolClientOf, PostgresStore, PostgresStoreOptions } from './store.js';
export { postgresStore } from './store.js';
