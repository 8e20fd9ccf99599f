/**
 * The SQL executor the data-layer guards run on. It lives with the driver shapes in
 * drivers/sql-executor.ts (messaging uses it too); `idemkit/patterns` exports it from here.
 */
export { sqlExecutor, toPgPlaceholders } from '../drivers/sql-executor.js';
export type {
  MysqlConnectionLike,
  MysqlPoolLike,
  MysqlValue,
  PgClientLike,
  PgPoolLike,
  PgQueryResult,
  SqlDatabase,
  SqlDialect,
  SqlExecutor,
  SqlExecutorOptions,
  SqlResult,
  SqliteDatabaseLike,
  SqliteStatementLike,
} from '../drivers/sql-executor.js';
