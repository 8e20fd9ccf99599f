export { sqlExecutor, toPgPlaceholders } from './sql.js';
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
} from './sql.js';
export { insertOnce } from './insert-once.js';
export type { InsertOnceOptions, InsertOnceResult } from './insert-once.js';
export { stateMachine, transition } from './state-machine.js';
export type { StateMachine, StateMachineDefinition, TransitionOptions, TransitionResult } from './state-machine.js';
export { retryOnVersionConflict, versionedUpdate } from './versioned.js';
export type { RetryOnVersionConflictOptions, VersionedUpdateOptions, VersionedUpdateResult } from './versioned.js';
export { oneTimeTokens } from './tokens.js';
export type { OneTimeTokens, OneTimeTokensOptions } from './tokens.js';
export { redisLock } from './lock.js';
export type { Lease, RedisLock, RedisLockOptions } from './lock.js';
export type { RedisCaller, RedisClientLike, RedisCommandSender } from './redis.js';
export { IllegalTransitionError, InvalidStateMachineError, RowVanishedError, UnknownStateError, VersionConflictError } from './errors.js';
export { STARTED, Phases, definePhases, foreignKeyFor } from './phases.js';
export type { ForeignPhaseArgs, LocalPhaseArgs, PhaseHost, PhaseState } from './phases.js';
export { PhaseError } from './phase-errors.js';
export { completer } from './completer.js';
export type { CompletedResponse, Completer, CompleterOptions, CompleterReport } from './completer.js';
