/**
 * Every `code` an idemkit error carries, with the one class that carries it, the entry point that
 * exports that class, and, for the errors a request is answered with, the HTTP status and the
 * problem `type` slug and title. This is the one list: the classes take their code (and HTTP
 * facts) from it, test/core/error-codes.test.ts holds every class and every throw site in src to
 * it, and docs/semantics.md ("Error codes") documents it for users, who match on codes.
 *
 * Data only, so that core imports no client, check, messaging or patterns module to list them.
 */

/** Where a class is exported from (the package entry point). */
export type ErrorEntryPoint = 'idemkit' | 'idemkit/client' | 'idemkit/check' | 'idemkit/messaging' | 'idemkit/patterns';

/** What answers a request with this code: `problem+json` with this status, type slug and title. */
export interface HttpProblemFacts {
  readonly status: number;
  /** Appended to the problem type base (`PROBLEM_BASE`, or the `problemTypeBase` option) to make the problem `type`. */
  readonly slug: string;
  readonly title: string;
  /**
   * The problem `detail` when it is fixed whatever the error's message says: the codes stores
   * also throw, whose messages describe the backend and are not for the client.
   */
  readonly detail?: string;
}

export interface ErrorCodeEntry {
  /** The class that carries the code; `instanceof` it holds exactly for errors with this code (or its family's codes). */
  readonly class: string;
  readonly from: ErrorEntryPoint;
  readonly http?: HttpProblemFacts;
}

const core = <C extends string>(name: C) => ({ class: name, from: 'idemkit' }) as const;
const http = <C extends string, H extends HttpProblemFacts>(name: C, problem: H) => ({ class: name, from: 'idemkit', http: problem }) as const;
const client = <C extends string>(name: C) => ({ class: name, from: 'idemkit/client' }) as const;
const check = <C extends string>(name: C) => ({ class: name, from: 'idemkit/check' }) as const;
const messaging = <C extends string>(name: C) => ({ class: name, from: 'idemkit/messaging' }) as const;
const patterns = <C extends string>(name: C) => ({ class: name, from: 'idemkit/patterns' }) as const;

export const ERROR_CODES = {
  // Options and configuration.
  ERR_IDEMKIT_INVALID_OPTION: core('InvalidOptionError'),
  ERR_IDEMKIT_MOUNTED_TWICE: core('MountedTwiceError'),
  ERR_IDEMKIT_INSTANCE_IN_USE: core('InstanceInUseError'),
  // What a request is answered with.
  ERR_IDEMKIT_KEY_MISSING: http('MissingKeyError', { status: 400, slug: 'missing-key', title: 'Idempotency-Key is missing' }),
  ERR_IDEMKIT_KEY_INVALID: http('InvalidKeyError', { status: 400, slug: 'invalid-key', title: 'Idempotency-Key is invalid' }),
  ERR_IDEMKIT_SCOPE_INVALID: http('InvalidScopeError', { status: 400, slug: 'invalid-scope', title: 'The request has no usable idempotency scope' }),
  ERR_IDEMKIT_BODY_TOO_LARGE: http('BodyTooLargeError', { status: 413, slug: 'body-too-large', title: 'Request body too large' }),
  ERR_IDEMKIT_KEY_IN_FLIGHT: http('KeyInFlightError', { status: 409, slug: 'request-in-progress', title: 'A request with this Idempotency-Key is in progress' }),
  ERR_IDEMKIT_KEY_MISMATCH: http('KeyMismatchError', { status: 422, slug: 'key-reused', title: 'Idempotency-Key is already used' }),
  ERR_IDEMKIT_LEASE_LOST: http('LeaseLostError', {
    status: 409,
    slug: 'lease-lost',
    title: 'The request lost ownership of its Idempotency-Key',
    detail: 'The request ran past its lease and another request took over; nothing from this attempt was committed.',
  }),
  ERR_IDEMKIT_STORE_UNAVAILABLE: http('StoreUnavailableError', {
    status: 503,
    slug: 'store-unavailable',
    title: 'Idempotency store unavailable',
    detail: 'The idempotency store could not be reached or did not answer in time; the request was not executed. Retry with the same key.',
  }),
  ERR_IDEMKIT_STORE_FULL: http('StoreFullError', {
    status: 503,
    slug: 'store-full',
    title: 'Idempotency store full',
    detail: 'The idempotency store has no room for a new key without forgetting an answer it still owes; the request was not executed. Retry with the same key after Retry-After.',
  }),
  ERR_IDEMKIT_STORE_BUSY: http('StoreBusyError', {
    status: 503,
    slug: 'store-busy',
    title: 'Idempotency store busy',
    detail: "The idempotency store's writer is busy with another transaction; this request was not executed. Retry with the same key after Retry-After.",
  }),
  ERR_IDEMKIT_EXECUTION_TIMEOUT: http('ExecutionTimeoutHttpError', { status: 503, slug: 'execution-timeout', title: 'The request ran past its time limit' }),
  // The Express middleware reading the request body.
  ERR_IDEMKIT_BODY_NOT_KEPT: core('BodyNotKeptError'),
  ERR_IDEMKIT_REQUEST_ABORTED: core('RequestAbortedError'),
  // Inside a request: the context and its transactions.
  ERR_IDEMKIT_TRANSACTIONAL_MODE: core('TransactionalModeError'),
  ERR_IDEMKIT_NOT_TRANSACTIONAL: core('NotTransactionalError'),
  ERR_IDEMKIT_EXECUTION_ENDED: core('ExecutionEndedError'),
  ERR_IDEMKIT_TRANSACTION_ENDED: core('TransactionEndedError'),
  // Stores.
  ERR_IDEMKIT_INVALID_REF: core('InvalidRecordRefError'),
  ERR_IDEMKIT_CORRUPT_RECORD: core('CorruptRecordError'),
  // A request meets it too, answered 500 without Retry-After: the fault lasts until someone migrates.
  ERR_IDEMKIT_STORE_SCHEMA_MISSING: http('StoreSchemaMissingError', {
    status: 500,
    slug: 'store-schema-missing',
    title: 'Idempotency store not migrated',
    detail: "The idempotency store's table or functions are missing, so the request was not executed. Retrying will not help until the service's operator migrates the store.",
  }),
  ERR_IDEMKIT_STORE_INCOMPATIBLE: core('StoreIncompatibleError'),
  // idemkit/client.
  ERR_IDEMKIT_REQUEST_FAILED: client('RequestFailedError'),
  ERR_IDEMKIT_RETRY_BUDGET_EXHAUSTED: client('RetryBudgetExhaustedError'),
  ERR_IDEMKIT_HTTP_STATUS: client('HttpStatusError'),
  ERR_IDEMKIT_RESPONSE_TOO_LARGE: client('ResponseTooLargeError'),
  ERR_IDEMKIT_CROSS_ORIGIN_REDIRECT: client('CrossOriginRedirectError'),
  ERR_IDEMKIT_TOO_MANY_REDIRECTS: client('TooManyRedirectsError'),
  ERR_IDEMKIT_ATTEMPT_TIMEOUT: client('AttemptTimeoutError'),
  ERR_IDEMKIT_BODY_NOT_REPLAYABLE: client('BodyNotReplayableError'),
  // idemkit/check.
  ERR_IDEMKIT_CHECK_CONFIG: check('CheckConfigError'),
  ERR_IDEMKIT_CHECK_UNREACHABLE: check('TargetUnreachableError'),
  ERR_IDEMKIT_CHECK_REQUEST: check('CheckRequestError'),
  ERR_IDEMKIT_CLI_USAGE: check('CliUsageError'),
  // idemkit/messaging.
  ERR_IDEMKIT_MESSAGE_ID_MISSING: messaging('MissingMessageIdError'),
  ERR_IDEMKIT_MESSAGE_ID_INVALID: messaging('InvalidMessageIdError'),
  ERR_IDEMKIT_MESSAGE_SCOPE_CLASH: messaging('MessageScopeClashError'),
  ERR_IDEMKIT_WEBHOOK_UNVERIFIED: messaging('WebhookVerificationError'),
  ERR_IDEMKIT_WEBHOOK_RAW_BODY: messaging('WebhookRawBodyError'),
  // idemkit/patterns: these codes predate the ERR_IDEMKIT_ prefix and are kept as users match on them.
  UNKNOWN_STATE: patterns('UnknownStateError'),
  ILLEGAL_TRANSITION: patterns('IllegalTransitionError'),
  INVALID_STATE_MACHINE: patterns('InvalidStateMachineError'),
  VERSION_CONFLICT: patterns('VersionConflictError'),
  ROW_VANISHED: patterns('RowVanishedError'),
  // PhaseError is one class for a family of codes: the definition or the record is wrong.
  EMPTY_PHASE_NAME: patterns('PhaseError'),
  RESERVED_PHASE: patterns('PhaseError'),
  DUPLICATE_PHASE: patterns('PhaseError'),
  INVALID_PHASE: patterns('PhaseError'),
  NO_PHASES: patterns('PhaseError'),
  NO_CONTEXT: patterns('PhaseError'),
  UNKNOWN_PHASE: patterns('PhaseError'),
  DEFINITION_MISMATCH: patterns('PhaseError'),
  CORRUPT_RECOVERY_DATA: patterns('PhaseError'),
  OUTPUT_NOT_JSON: patterns('PhaseError'),
  ERR_IDEMKIT_RESULT_NOT_KEPT: patterns('ResultNotKeptError'),
} as const satisfies Readonly<Record<string, ErrorCodeEntry>>;

/** A code idemkit throws. */
export type ErrorCode = keyof typeof ERROR_CODES;

/** The codes whose table entry names `Class`. */
export type CodeOf<Class extends string> = { [K in ErrorCode]: (typeof ERROR_CODES)[K]['class'] extends Class ? K : never }[ErrorCode];

/** The codes of the errors a request is answered with (problem+json). */
export type HttpErrorCode = { [K in ErrorCode]: (typeof ERROR_CODES)[K] extends { readonly http: HttpProblemFacts } ? K : never }[ErrorCode];

/** The codes of `PhaseError`. */
export type PhaseErrorCode = CodeOf<'PhaseError'>;

/** The table's entry for `code`, or undefined for a code idemkit does not throw (a user's own). */
export function errorCodeEntry(code: string): ErrorCodeEntry | undefined {
  return Object.hasOwn(ERROR_CODES, code) ? (ERROR_CODES as Readonly<Record<string, ErrorCodeEntry>>)[code] : undefined;
}
