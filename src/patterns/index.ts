export { sqlExecutor, toPgPlaceholders } from './sql.js';
export type {
  MysqlConnectionLike,
  MysqlPoolLike,
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
} from './sql.js';
