// SqlDatabase and RedisClientLike are the unions of driver shapes the guards accept (structural:
// an application passes its own pool or client), for code that takes one of them through.
export { sqlExecutor } from './sql.js';
export type { SqlDatabase, SqlDialect, SqlExecutor, SqlExecutorOptions, SqlResult } from './sql.js';
export { insertOnce } from './insert-once.js';
export type { InsertOnceOptions } from './insert-once.js';
export { stateMachine, transition } from './state-machine.js';
export type { StateMachine, StateMachineDefinition, TransitionOptions } from './state-machine.js';
export { retryOnVersionConflict, versionedUpdate } from './versioned.js';
export type { RetryOnVersionConflictOptions, VersionedUpdateOptions } from './versioned.js';
export { oneTimeTokens } from './tokens.js';
export type { OneTimeTokens, OneTimeTokensOptions } from './tokens.js';
export { redisLock } from './lock.js';
export type { RedisClientLike } from './redis.js';
export type { Lease, RedisLock, RedisLockOptions } from './lock.js';
export { IllegalTransitionError, InvalidStateMachineError, ResultNotKeptError, RowVanishedError, UnknownStateError, VersionConflictError } from './errors.js';
export { idempotent } from './idempotent.js';
export type { IdempotentOptions } from './idempotent.js';
export { STARTED, Phases, definePhases, foreignKeyFor } from './phases.js';
export type { PhaseState } from './phases.js';
export { PhaseError } from './phase-errors.js';
export { completer } from './completer.js';
export type { Completer, CompleterOptions } from './completer.js';
// The loop's options by name, for code that builds them apart from the call (a config module);
// the events' and stop()'s types are reachable through CompleterOptions and Completer.
export type { CompleterStartOptions } from './completer-runner.js';
