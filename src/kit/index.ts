/**
 * `idemkit/kit`: what those who write an adapter (a framework binding) or a store import, in
 * addition to `idemkit` (the options, the context types, the store types an application names, and
 * every error class are there, and only there). docs/kit.md walks through both.
 */

// ─── Adapters: the engine, and what it decides per request ────────────────────────────────────
export { IdempotencyEngine, Execution } from '../core/engine.js';
export type { AbandonedCheck, Decision, EngineOverrides, RequestBody, RequestReader } from '../core/engine.js';
export { resolveOptions, DEFAULT_REPLAY_HEADERS } from '../core/options.js';
export type { EngineOptions, ResolvedOptions } from '../core/options.js';
export { parseIdempotencyKey, MAX_KEY_LENGTH } from '../core/key.js';
export { fingerprint } from '../core/fingerprint.js';
export type { FingerprintInput } from '../core/fingerprint.js';

// ─── Adapters: turning a framework's response into a stored one, and a stored one back ────────
export type { ResponseHeaders } from '../core/response.js';
export {
  toStoredResponse,
  replayHeaderList,
  replayHeaderRecord,
  replayBody,
  isNullBodyStatus,
  REPLAYED_HEADER,
  BODY_OMITTED_HEADER,
} from '../core/response.js';

// ─── Stores: the contract a store implements ──────────────────────────────────────────────────
export type { Claim, ClaimOptions, Clock, IdempotencyRecord, IncarnationLeases, RecordRef, RecordState, StoredResponse, StoreTransaction } from '../core/store.js';
export { canListAbandoned, fitResponse, isTransactionalStore, systemClock, DEFAULT_MAX_RESPONSE_BYTES } from '../core/store.js';
export { newOwnerToken } from '../core/token.js';
export { checkRecordRef } from '../core/validate.js';
export { RESERVED_SCOPE_MARK, isReservedScope } from '../core/namespaces.js';

// ─── Stores: the admin views (`idemkit list`, `inspect`, `stats`, `purge`, the page) ──────────
export type { AdministrableStore, PurgeOutcome, RecordDetails, RecordFilter, RecordStats, RecordSummary, StoreAdmin } from '../core/store.js';
export { hasAdmin } from '../core/store.js';

// ─── Both: reading a factory's options (unknown keys refused with the name probably meant) ────
export { optionReader, OptionReader, checkInteger } from '../core/option-reader.js';
export type { ReaderSettings } from '../core/option-reader.js';

// ─── Stores: the contract suite, run with the caller's test framework ─────────────────────────
export { describeStoreContract } from './contract/index.js';
export type { ContractContext, ContractSection, ContractTestApi } from './contract/index.js';
