/**
 * `idemkit/stores/mysql`: the store on mysql2/promise (store.ts; its statements in sql.ts, its
 * pool in connections.ts, its admin in admin.ts). The pool it takes is structural
 * (src/drivers/mysql.ts): the application passes its own.
 */
export { mysqlSchema } from './sql.js';
export type { MysqlStore, MysqlStoreOptions } from './store.js';
export { mysqlStore } from './store.js';
