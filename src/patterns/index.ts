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
export { STARTED, Phases, definePhases, foreignKeyFor } from './phases.js';
export type { ForeignPhaseArgs, LocalPhaseArgs, PhaseHost, PhaseState } from './phases.js';
export { PhaseError } from './phase-errors.js';
export { completer } from './completer.js';
export type { CompletedResponse, Completer, CompleterOptions, CompleterReport } from './completer.js';
