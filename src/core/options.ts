import type { IdempotencyEvents } from './events.js';
import type { Instance } from './instance.js';
import { readInstance } from './instance.js';
import { EVENT_NAMES, EventSink } from './events.js';
import type { KeyPolicy } from './key.js';
import type { IdempotencyLogger } from './logger.js';
import { consoleLogger, FailureReporter } from './logger.js';
import type { ReaderSettings } from './option-reader.js';
import type { OptionReader } from './option-reader.js';
import { isHttpToken, optionReader } from './option-reader.js';
import type { IdempotencyStore, TransactionalStore } from './store.js';
import { isTransactionalStore } from './store.js';

/**
 * What `transactional` may be for a store: `false` for a store without transactions (so that
 * `transactional: true` with a Redis or memory store is a type error, not only a start-up one),
 * any boolean for a SQL store or a store whose type is not known more precisely.
 *
 * The object type beside `false` can hold no value: it is there so that the compiler's error for
 * `transactional: true` quotes what the start-up error says, rather than "Type 'true' is not
 * assignable to type 'undefined'".
 */
export type TransactionalFlag<Store> = IdempotencyStore extends Store
  ? boolean
  : Store extends TransactionalStore
    ? boolean
    : false | { readonly 'transactional: the store has no transactions; use a SQL store (postgresStore, mysqlStore or sqliteStore)': never };

/**
 * Options shared by every adapter; `Req` is the adapter's native request type. `Store` and
 * `Transactional` are inferred from `store` and `transactional`, so that `ctx.tx` gets the store's
 * transaction type (see `ContextFor`); nobody needs to write them.
 */
export interface IdempotencyOptions<Req = unknown, Store extends IdempotencyStore = IdempotencyStore, Transactional extends boolean = boolean> {
  /** Where records live. Required. */
  readonly store: Store;
  /**
   * Methods the decision matrix applies to; others pass through untouched.
   * @default ['POST', 'PATCH']
   */
  readonly methods?: readonly string[];
  /**
   * Answer 400 when a covered request has no key. When false, such requests pass through unprotected.
   * @default true
   */
  readonly required?: boolean;
  /**
   * The request header that carries the key.
   * @default 'Idempotency-Key'
   */
  readonly header?: string;
  /** Extra key restrictions (minimum length, UUID or ULID only). @default {} */
  readonly keyPolicy?: KeyPolicy;
  /**
   * The tenant a key belongs to, typically the authenticated account; the stored key is always
   * (scope, key), so two tenants never share records. Throw an `IdempotencyHttpError` to refuse.
   *
   * **Changing it re-executes every retry still inside its window** (a deploy that adds or changes
   * this hook, or two instances with different hooks on one store): the retry's (scope, key) is a
   * new record, so the handler runs again and answers as if it were the first request. Unless
   * `previousScope` is set to the old hook for one `windowMs` (docs/semantics.md, "Mixed deployments").
   * @default () => '' (one global scope: use only when keys come from a single trusted client)
   */
  readonly scope?: (request: Req) => string | Promise<string>;
  /**
   * The `scope` hook this deployment replaces, for one retention window after the change: a
   * request whose key is new under `scope` is first looked up under this scope (a claim, so
   * instances still on the old hook are ordered with it), and answered from a record found there
   * (replay, 409, 422) instead of running again. While the handler runs, the old scope's record is
   * held too and gets the same stored answer, so instances still on the old hook replay it. Costs
   * one more claim (and its completion) per new key. Remove it `windowMs` after the last instance
   * with the old hook stopped. See docs/semantics.md, "Mixed deployments".
   * @default undefined (no previous scope)
   */
  readonly previousScope?: (request: Req) => string | Promise<string>;
  /**
   * Fingerprint only these JSON body fields (dotted paths). Method and path are always included.
   * The stored fingerprint names its field list by a digest (`v2:<digest>:<hex>`): an instance with
   * other settings checks a retry the way its record was made when it knows that list (its own, or
   * `previousFingerprintFields`), and otherwise answers 422 saying the settings differ.
   * @default undefined (the whole body)
   */
  readonly fingerprintFields?: readonly string[];
  /**
   * The `fingerprintFields` this deployment replaces (or another instance on the same store uses):
   * a retry whose record was made with them is checked with them, and replayed when it is the same
   * request by that record's own measure, rather than answered 422. Records made with the whole
   * body need nothing here.
   * @default undefined (none)
   */
  readonly previousFingerprintFields?: readonly string[];
  /**
   * How long a claim is trusted before another request may take over, in ms.
   * @default 30_000
   */
  readonly leaseMs?: number;
  /**
   * How long a key is remembered, in ms (Stripe keeps keys 24 h). Set when a key is first claimed:
   * where instances on one store differ, the claimer's window is the record's, so the shortest
   * window among them is all a key can count on.
   * @default 86_400_000
   */
  readonly windowMs?: number;
  /**
   * Renew the lease every `leaseMs / 3` while the handler runs, so a slow but live handler is
   * never taken over.
   * @default true
   */
  readonly renewLease?: boolean;
  /**
   * The longest a handler may hold its key, in ms. Without it (the default) a handler's claim is
   * renewed for as long as it runs, whether or not its client is still connected, so nothing
   * runs twice while it might still act; a handler that never ends holds its key (409 to every
   * retry) until the process stops. Past this ceiling the claim is no longer renewed and
   * `onError` is told; in transactional mode the transaction is rolled back at once and `ctx.tx`
   * refuses every later call, so the handler can never commit afterwards and answers 503
   * `execution-timeout`. Outside transactional mode the handler's effect cannot be stopped: once
   * the lease has run out a retry takes over and may run while the first is still acting; its late
   * completion is refused by the owner token. Checked every `leaseMs / 3`.
   * @default Infinity (no ceiling)
   */
  readonly maxExecutionMs?: number;
  /**
   * The largest request body read for fingerprinting; larger bodies get 413 and nothing is stored.
   * @default 1_048_576
   */
  readonly maxBodyBytes?: number;
  /**
   * What a request gets while the first one with its key is still running: `'conflict'` answers
   * 409 with Retry-After (see `retryAfterMs`); `'wait'` waits up to `waitTimeoutMs` and replays the result.
   * @default 'conflict'
   */
  readonly inFlight?: 'conflict' | 'wait';
  /**
   * The `Retry-After` a 409 suggests, in ms: how long the original request likely still takes,
   * not how long its lease lasts (a duplicate of a 50 ms request should not be told to come back
   * in 30 s). Never more than what is left of the original's lease, and sent in whole seconds, at
   * least 1 (RFC 9110 §10.2.3); the problem body carries it in ms too (member `retryAfterMs`), for
   * clients that read it (idemkit's). Set it near your handlers' usual duration when they take longer.
   * That is while the original's owner is alive: once its record has gone 1.5 renewal periods
   * (`leaseMs / 2`) unchanged, the 409 says `owner: 'unresponsive'` and suggests the end of its
   * lease instead, when a retry takes the key over (docs/semantics.md, "Is the owner alive?").
   * @default 1_000
   */
  readonly retryAfterMs?: number;
  /**
   * How long `inFlight: 'wait'` waits before answering 409, in ms.
   * @default 10_000
   */
  readonly waitTimeoutMs?: number;
  /**
   * Response headers kept and replayed, in addition to the defaults (content-type, location,
   * etag, …). `set-cookie` is never replayed and is refused here. Applied when the answer is
   * stored: a replay carries what the executing instance kept, whatever the replaying one's list.
   * @default []
   */
  readonly replayHeaders?: readonly string[];
  /**
   * Run the handler inside a store transaction, and commit the completion in that same
   * transaction. Requires a SQL store. A thrown error or a 5xx answer rolls back and releases the key.
   * @default false
   */
  readonly transactional?: Transactional & TransactionalFlag<Store>;
  /**
   * How long a store operation on the request path (claim, begin, complete) may take before the
   * store counts as unreachable (503 before the handler runs), in ms. Keeps a hung connection
   * from hanging requests.
   * @default 3_000
   */
  readonly storeTimeoutMs?: number;
  /**
   * This process's registered identity (`await startInstance({ store, name })`, on the same store):
   * its claims carry the incarnation, so that when the process crashes and restarts, its
   * successor ends the leases of what it left in flight and retries take those keys over at once
   * instead of after a whole lease.
   * @default undefined (a crashed process's keys wait out their leases)
   */
  readonly instance?: Instance | undefined;
  /**
   * When the store is unreachable, run the handler unprotected instead of answering 503.
   * @default false (fail closed)
   */
  readonly failOpen?: boolean;
  /**
   * A hook told about every store failure and every error that does not change the answer (a
   * failed renewal, a completion that could not be stored after the effect happened), each time
   * it happens. The same errors also reach `logger`, so this is for metrics or tracing, not logs.
   * @default undefined (nothing beyond `logger`)
   */
  readonly onError?: (error: unknown) => void;
  /**
   * Where failures are logged: any object with `warn(message, ...args)` and `error(message, ...args)`
   * (console, pino, winston, …). Each distinct failure (its code and message) is logged at most once
   * a minute, with a count of the ones left out, never once per request: a store that was never
   * migrated logs one `store-schema-missing` line naming what is missing (table, function or
   * column) and the fix (`store.migrate()` or `idemkit migrate`); a full memory store, one
   * `store-full` line naming the bound it reached.
   * @default console
   */
  readonly logger?: IdempotencyLogger;
  /**
   * Listeners told what the middleware decided for each request: `execute`, `takeover`, `replay`,
   * `conflict` (409), `mismatch` (422), `rejected` (400/413 before a claim), `leaseLost`,
   * `complete` (stored, omitted, released…, with sizes and durations) and `storeError`. Each
   * carries scope, key, method and path. Events nobody listens to are never built.
   * @default {} (none)
   */
  readonly events?: IdempotencyEvents;
  /**
   * Events carry a stable hash of scope and key (`sha256:…`) instead of the key itself, for logs
   * that must not hold client-chosen identifiers.
   * @default false
   */
  readonly redactKeys?: boolean;
  /**
   * The base of the `type` of every problem+json answer: each problem appends its slug
   * (`request-in-progress`, `key-reused`, …; see docs/semantics.md, "Error codes"). Give your own
   * documentation's address, an absolute URI ending in `/` or `#`
   * (`'https://docs.example.com/errors/'`), or a URN ending in `:`, for the types to lead there.
   * @default 'urn:idemkit:problem:' (an identifier, not a locator)
   */
  readonly problemTypeBase?: string;
}

/**
 * The options as the engine takes them, from any adapter: `transactional` is checked against the
 * store when the adapter's caller writes the options, and at start-up by the engine.
 */
export type EngineOptions<Req = unknown> = Omit<IdempotencyOptions<Req>, 'transactional'> & { readonly transactional?: boolean };

/**
 * The options with every default filled in. Derived from `IdempotencyOptions`: an option is
 * declared there once, and only the ones resolved into another shape are restated here.
 */
export type ResolvedOptions<Req> = Readonly<
  Required<Omit<IdempotencyOptions<Req>, 'methods' | 'fingerprintFields' | 'previousFingerprintFields' | 'previousScope' | 'replayHeaders' | 'events' | 'instance'>>
> & {
  /** Undefined when nobody listens: the request path then builds no event. */
  readonly events: EventSink | undefined;
  /** Upper-cased. */
  readonly methods: ReadonlySet<string>;
  readonly instance: Instance | undefined;
  readonly fingerprintFields: readonly string[] | undefined;
  readonly previousFingerprintFields: readonly string[] | undefined;
  readonly previousScope: ((request: Req) => string | Promise<string>) | undefined;
  /** Lower-cased, with the defaults. */
  readonly replayHeaders: ReadonlySet<string>;
};

/** Response headers replayed by default. */
export const DEFAULT_REPLAY_HEADERS: readonly string[] = [
  'content-type',
  'content-language',
  'content-location',
  'content-disposition',
  'content-encoding',
  'location',
  'etag',
  'last-modified',
  'cache-control',
  'expires',
  'link',
  'vary',
];

const NEVER_REPLAYED = new Set(['set-cookie', 'set-cookie2']);

/**
 * `onError` as the engine calls it: the user's hook, then the logger (rate-limited per distinct
 * failure). A hook that throws does not keep the failure from the log.
 */
function reporting(hook: (error: unknown) => void, logger: IdempotencyLogger): (error: unknown) => void {
  const reporter = new FailureReporter(logger);
  return (error) => {
    try {
      hook(error);
    } finally {
      reporter.report(error);
    }
  };
}

/**
 * Validates every option eagerly and fills in defaults; throws `InvalidOptionError` naming the
 * option. `naming` names the options another way in errors (a Fastify route's
 * `config.idempotency.leaseMs of /orders`).
 */
export function resolveOptions<Req>(options: EngineOptions<Req>, naming?: ReaderSettings): ResolvedOptions<Req> {
  const read = optionReader('idempotency()', options, naming);
  const store = read.value('store');
  if (!store || typeof store.claim !== 'function' || typeof store.complete !== 'function') {
    read.fail('store', 'expected an IdempotencyStore (memoryStore(), sqliteStore(), …)');
  }
  const methods = read.methods('methods', ['POST', 'PATCH']);
  const header = read.header('header', 'Idempotency-Key');
  const policy = read.object('keyPolicy');
  policy?.integer('minLength', { min: 1 });
  policy?.oneOf('format', ['any', 'uuid', 'ulid'], {});
  policy?.done();
  const keyPolicy = read.value('keyPolicy') ?? {};
  const scope = read.function('scope', { default: () => '', expected: 'a function (request) => tenant' });
  const previousScope = read.function('previousScope', { expected: 'a function (request) => the tenant as the replaced scope hook gave it' });
  const fields = fieldList(read, 'fingerprintFields');
  const previousFields = fieldList(read, 'previousFingerprintFields');
  const leaseMs = read.duration('leaseMs', { default: 30_000, min: 10 });
  const windowMs = read.integer('windowMs', { default: 86_400_000, min: 1 });
  if (windowMs < leaseMs) read.fail('windowMs', `must be at least leaseMs (${leaseMs})`);
  const inFlight = read.oneOf('inFlight', ['conflict', 'wait'], { default: 'conflict' });
  const replayHeaders = new Set(DEFAULT_REPLAY_HEADERS);
  for (const name of read.value('replayHeaders') ?? []) {
    if (!isHttpToken(name)) read.fail('replayHeaders', `not a header name: ${String(name)}`);
    if (NEVER_REPLAYED.has(name.toLowerCase())) read.fail('replayHeaders', 'set-cookie is never replayed');
    replayHeaders.add(name.toLowerCase());
  }
  const eventsReader = read.object('events');
  for (const name of EVENT_NAMES) eventsReader?.function(name);
  eventsReader?.done();
  const listeners = read.value('events') ?? {};
  const redactKeys = read.boolean('redactKeys', { default: false });
  const onError = reporting(
    read.function('onError', { default: () => {} }),
    read.driver('logger', ['warn', 'error'], 'a logger with warn() and error() (console, pino, …)', { optional: true }) ?? consoleLogger,
  );
  const transactional = read.boolean('transactional', { default: false });
  if (transactional && !isTransactionalStore(store)) {
    read.fail('transactional', `the store "${store.name}" has no transactions; use a SQL store (postgresStore, mysqlStore or sqliteStore)`);
  }
  // A store that can tell now that its transactions would fail (SQLite on an in-memory database) says so at mount.
  if (transactional) (store as TransactionalStore).checkTransactions?.();
  const resolved: ResolvedOptions<Req> = {
    store,
    methods,
    required: read.boolean('required', { default: true }),
    header,
    keyPolicy,
    scope,
    fingerprintFields: fields,
    previousFingerprintFields: previousFields,
    previousScope,
    leaseMs,
    windowMs,
    renewLease: read.boolean('renewLease', { default: true }),
    maxExecutionMs: read.duration('maxExecutionMs', { default: Infinity, min: 1, infinity: true }),
    maxBodyBytes: read.integer('maxBodyBytes', { default: 1024 * 1024, min: 1 }),
    inFlight,
    retryAfterMs: read.duration('retryAfterMs', { default: 1_000, min: 1 }),
    waitTimeoutMs: read.duration('waitTimeoutMs', { default: 10_000, min: 1 }),
    replayHeaders,
    transactional,
    storeTimeoutMs: read.duration('storeTimeoutMs', { default: 3_000, min: 1 }),
    failOpen: read.boolean('failOpen', { default: false }),
    instance: readInstance(read.value('instance'), store, (message) => read.fail('instance', message)),
    onError,
    logger: read.value('logger') ?? consoleLogger,
    redactKeys,
    // Undefined unless someone listens: the request path then builds no event and reads no clock.
    events: EVENT_NAMES.some((name) => listeners[name] !== undefined) ? new EventSink(listeners, redactKeys, onError) : undefined,
    problemTypeBase: read.problemTypeBase('problemTypeBase'),
  };
  read.done();
  return resolved;
}

function fieldList<Req>(read: OptionReader<EngineOptions<Req>>, name: 'fingerprintFields' | 'previousFingerprintFields'): readonly string[] | undefined {
  const fields = read.value(name);
  if (fields !== undefined && (!Array.isArray(fields) || fields.length === 0 || fields.some((f) => typeof f !== 'string' || f === ''))) {
    read.fail(name, 'expected a non-empty array of field paths');
  }
  return fields;
}
