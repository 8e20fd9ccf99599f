/**
 * `idemkit`: what an application author imports. The options and the context of a handler, the
 * events, the store types an application passes around, and the errors it may catch. Adapters
 * (`idemkit/express`, `idemkit/hono`, …) and stores (`idemkit/stores/*`) have their own entry
 * points; what adapter and store authors need beyond this is in `idemkit/kit`.
 */
import type { ContextFor, IdempotencyContext } from './execution.js';

// ─── A handler's context, typed by its store ──────────────────────────────────────────────────
export type { ContextFor, FencedTransaction, IdempotencyContext } from './execution.js';
export type { AbandonedRecords, IdempotencyStore, TransactionalStore, TxOf } from './store.js';

// ─── Options ──────────────────────────────────────────────────────────────────────────────────
export type { IdempotencyOptions } from './options.js';
export type { KeyPolicy } from './key.js';
export type { FingerprintOptions } from './fingerprint.js';
export type { IdempotencyLogger } from './logger.js';
export { consoleLogger } from './logger.js';
export { startInstance } from './instance.js';
export type { Instance } from './instance.js';
export type {
  CompleteEvent,
  ConflictEvent,
  EventRequest,
  ExecuteEvent,
  IdempotencyEvents,
  LeaseLostEvent,
  MismatchEvent,
  RejectedEvent,
  ReplayEvent,
  StoreErrorEvent,
  TakeoverEvent,
} from './events.js';
export { redactedKey } from './events.js';

// ─── Errors: one class per code (docs/semantics.md, "Errors"), and their problem+json ─────────
export { ERROR_CODES } from './error-codes.js';
export type { ErrorCode } from './error-codes.js';
export {
  BodyNotKeptError,
  BodyTooLargeError,
  CorruptRecordError,
  ExecutionEndedError,
  ExecutionTimeoutHttpError,
  IdemkitError,
  IdempotencyHttpError,
  InstanceInUseError,
  InvalidKeyError,
  InvalidOptionError,
  InvalidRecordRefError,
  InvalidScopeError,
  KeyInFlightError,
  KeyMismatchError,
  LeaseLostError,
  MissingKeyError,
  MountedTwiceError,
  NotTransactionalError,
  PROBLEM_BASE,
  PROBLEM_CONTENT_TYPE,
  problemFor,
  RequestAbortedError,
  StoreBusyError,
  StoreFullError,
  StoreIncompatibleError,
  StoreSchemaMissingError,
  StoreUnavailableError,
  TransactionalModeError,
  TransactionEndedError,
} from './errors.js';
export type { ProblemDetails } from './errors.js';

/**
 * Declaration merging for the adapters whose request type is global (Express's `req.idempotency`,
 * Fastify's `request.idempotency`): tell TypeScript once which store the app uses, and `ctx.tx` is
 * that store's transaction type on every route.
 *
 * ```ts
 * declare module 'idemkit' {
 *   interface Register {
 *     store: typeof store;
 *     transactional: true; // false or left out: `tx` is undefined; boolean: either
 *   }
 * }
 * ```
 *
 * Unregistered, `req.idempotency` is an `IdempotencyContext` whose `tx` is `unknown`. (Hono, the
 * web adapter and Express's `middleware.context(req)` infer it from their options instead.)
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- filled in by the application through declaration merging.
export interface Register {}

/** The context `req.idempotency` has: `ContextFor` the registered store, or the untyped one. */
export type RegisteredContext = Register extends { readonly store: infer Store }
  ? ContextFor<Store, Register extends { readonly transactional: infer Transactional extends boolean } ? Transactional : false>
  : IdempotencyContext;
