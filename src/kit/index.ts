/**
 * `idemkit/kit`: the API for those who write an adapter (a framework binding) or a store, kept
 * apart from the application API of `idemkit`. A plain list of re-exports, so that it follows the
 * core as it changes. (The root entry still exports most of these names, for compatibility.)
 */

// ─── Adapters: the engine, and what it decides per request ────────────────────────────────────
export { IdempotencyEngine, Execution } from '../core/engine.js';
// Every type of the engine: Decision, RequestReader, RequestBody, IdempotencyContext, FencedTransaction, …
export type * from '../core/engine.js';
export type { ResponseHeaders } from '../core/response.js';
export { resolveOptions, DEFAULT_REPLAY_HEADERS } from '../core/options.js';
export type { IdempotencyOptions, ResolvedOptions } from '../core/options.js';
export { parseIdempotencyKey, MAX_KEY_LENGTH } from '../core/key.js';
export type { KeyPolicy } from '../core/key.js';
export { fingerprint } from '../core/fingerprint.js';
export type { FingerprintInput, FingerprintOptions } from '../core/fingerprint.js';

// ─── Adapters: turning a framework's response into a stored one, and a stored one back ────────
export {
  toStoredResponse,
  replayHeaderList,
  replayHeaderRecord,
  replayBody,
  isNullBodyStatus,
  REPLAYED_HEADER,
  BODY_OMITTED_HEADER,
} from '../core/response.js';
export { IdempotencyHttpError, PROBLEM_CONTENT_TYPE, problemFor } from '../core/errors.js';
export type { ProblemDetails } from '../core/errors.js';

// ─── Stores: the contract a store implements ──────────────────────────────────────────────────
export { canListAbandoned, fitResponse, isTransactionalStore, systemClock, DEFAULT_MAX_RESPONSE_BYTES } from '../core/store.js';
// Every type of the store contract: AbandonedRecords, Claim, ClaimOptions, Clock, IdempotencyRecord, IdempotencyStore, RecordRef, …
export type * from '../core/store.js';
export { newOwnerToken } from '../core/token.js';
export { checkRecordRef, MAX_TIMER_MS } from '../core/validate.js';

// ─── Both: reading a factory's options (unknown keys refused with the name probably meant) ────
export { optionReader, OptionReader, checkInteger, checkDuration, checkNumber, checkBoolean, checkProblemTypeBase, isHttpToken, HTTP_TOKEN } from '../core/option-reader.js';
export type { DurationRule, FunctionRule, IntegerRule, NumberRule, Presence, Read, ReaderSettings } from '../core/option-reader.js';
export { RESERVED_SCOPE_MARK, isReservedScope } from '../core/namespaces.js';
export { IdemkitError, CorruptRecordError, InvalidRecordRefError, LeaseLostError, StoreUnavailableError } from '../core/errors.js';

// ─── Stores: the contract suite, run with the caller's test framework ─────────────────────────
export { describeStoreContract } from './store-contract.js';
export type { ContractAssertion, ContractContext, ContractMatchers, ContractTestApi, ContractTestContext } from './store-contract.js';
