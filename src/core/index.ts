import type { ContextFor, IdempotencyContext } from './engine.js';

export * from './errors.js';
export { parseIdempotencyKey, MAX_KEY_LENGTH } from './key.js';
export type { KeyPolicy } from './key.js';
export { fingerprint } from './fingerprint.js';
export type { FingerprintInput, FingerprintOptions } from './fingerprint.js';
export { resolveOptions, DEFAULT_REPLAY_HEADERS } from './options.js';
export type { EngineOptions, IdempotencyOptions, ResolvedOptions, TransactionalFlag } from './options.js';
export { FailureReporter, consoleLogger } from './logger.js';
export { redactedKey } from './events.js';
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
export type { FailureReporterOptions, IdempotencyLogger } from './logger.js';
export { IdempotencyEngine, Execution } from './engine.js';
export type {
  AbandonedCheck,
  /** @deprecated Use `Decision`. */
  Admission,
  ContextFor,
  Decision,
  FencedTransaction,
  HandlerTx,
  IdempotencyContext,
  RequestBody,
  RequestFacts,
  RequestReader,
} from './engine.js';
export type { ResponseHeaders } from './response.js';
export { toStoredResponse, replayHeaderList, replayHeaderRecord, replayBody, isNullBodyStatus, REPLAYED_HEADER, BODY_OMITTED_HEADER } from './response.js';
export { newOwnerToken } from './token.js';
export { canListAbandoned, fitResponse, hasAdmin, isTransactionalStore, systemClock, DEFAULT_MAX_RESPONSE_BYTES } from './store.js';
// Every type of the store contract: AbandonedRecords, Claim, ClaimOptions, Clock, IdempotencyRecord, IdempotencyStore, RecordRef, …
export type * from './store.js';
export { integerOption, booleanOption, durationOption, checkRecordRef, MAX_TIMER_MS } from './validate.js';
export { RESERVED_SCOPE_MARK, isReservedScope } from './namespaces.js';

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
