export * from './errors.js';
export { parseIdempotencyKey, MAX_KEY_LENGTH } from './key.js';
export type { KeyPolicy } from './key.js';
export { fingerprint } from './fingerprint.js';
export type { FingerprintInput, FingerprintOptions } from './fingerprint.js';
export { resolveOptions, DEFAULT_REPLAY_HEADERS } from './options.js';
export type { IdempotencyOptions, ResolvedOptions } from './options.js';
export { FailureReporter, consoleLogger } from './logger.js';
export type { FailureReporterOptions, IdempotencyLogger } from './logger.js';
export { IdempotencyEngine, Execution } from './engine.js';
export type {
  AbandonedCheck,
  /** @deprecated Use `Decision`. */
  Admission,
  Decision,
  FencedTransaction,
  IdempotencyContext,
  RequestBody,
  RequestFacts,
  RequestReader,
} from './engine.js';
export type { ResponseHeaders } from './response.js';
export { toStoredResponse, replayHeaderList, replayHeaderRecord, replayBody, isNullBodyStatus, REPLAYED_HEADER, BODY_OMITTED_HEADER } from './response.js';
export { newOwnerToken } from './token.js';
export { canListAbandoned, fitResponse, isTransactionalStore, systemClock, DEFAULT_MAX_RESPONSE_BYTES } from './store.js';
// Every type of the store contract: AbandonedRecords, Claim, ClaimOptions, Clock, IdempotencyRecord, IdempotencyStore, RecordRef, …
export type * from './store.js';
export { integerOption, booleanOption, durationOption, checkRecordRef, MAX_TIMER_MS } from './validate.js';
export { RESERVED_SCOPE_MARK, isReservedScope } from './namespaces.js';
