/** `idemkit/stores/mysql`: the store on mysql2/promise (store.ts; its statements in sql.ts, its pool in connections.ts, its admin in admin.ts). */
export type { MysqlPool, MysqlPoolConnection, MysqlValue } from '../../drivers/mysql.js';
export { mysqlSchema } from './sql.js';
export type { MysqlConnection, MysqlStore, MysqlStoreOptions } from './store.js';
export { mysqlStore } from './store.js';
