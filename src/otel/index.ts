/**
 * OpenTelemetry for idemkit: spans and a latency histogram for every store operation
 * (`instrumentStore`), and the engine's decisions as attributes on the request's span and as
 * counters (`telemetryEvents`).
 *
 * This entry point imports `@opentelemetry/api` (an optional peer dependency); nothing else in
 * idemkit does, so an application without OpenTelemetry never loads it. With the API installed but
 * no SDK registered, every tracer and meter is the API's no-op one.
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Attributes, Counter, Histogram, Meter, Span, Tracer } from '@opentelemetry/api';
import { context, metrics, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { CompleteEvent, IdempotencyEvents, LeaseLostEvent } from '../core/events.js';
import { EVENT_NAMES, redactedKey } from '../core/events.js';
import { InvalidOptionError } from '../core/errors.js';
import { optionReader } from '../core/option-reader.js';
import type { IdempotencyStore, StoreTransaction } from '../core/store.js';
import type { OuterWrapper } from '../core/store-wrapper.js';
import { OUTER_WRAPPER } from '../core/store-wrapper.js';

/** The instrumentation scope's name: tracers and meters are `idemkit` at the package's version. */
export const INSTRUMENTATION_NAME = 'idemkit';

function packageVersion(): string | undefined {
  try {
    // Two levels below the package root, from src/otel and from dist/otel alike.
    return (createRequire(import.meta.url)('../../package.json') as { version?: string }).version;
  } catch {
    return undefined;
  }
}
const VERSION = packageVersion();

const defaultTracer = (): Tracer => trace.getTracer(INSTRUMENTATION_NAME, VERSION);
const defaultMeter = (): Meter => metrics.getMeter(INSTRUMENTATION_NAME, VERSION);

/**
 * Bucket boundaries of the duration histograms, in seconds: a store round trip is often well under
 * a millisecond, so they start at 0.1 ms (OpenTelemetry's default buckets, in ms, would put it all in one).
 */
export const DURATION_BUCKETS_S: readonly number[] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** The span and metric names this module records (see docs/operations.md). */
export const TELEMETRY_NAMES = {
  /** Histogram, seconds: one point per store operation. */
  storeDuration: 'idemkit.store.operation.duration',
  /** Counter: requests by `idemkit.outcome`. */
  requests: 'idemkit.requests',
  /** Counter: claimed requests' endings by `idemkit.completion`. */
  completions: 'idemkit.completions',
  /** Counter: claims that took an expired lease over. */
  takeovers: 'idemkit.takeovers',
  /** Counter: leases found lost, by `idemkit.lease_lost.during`. */
  leaseLosses: 'idemkit.lease_losses',
  /** Counter: store operations that failed or timed out on the request path, by `idemkit.store.operation`. */
  storeErrors: 'idemkit.store.errors',
  /** Histogram, seconds: from the claim to the handler's answer. */
  handlerDuration: 'idemkit.handler.duration',
} as const;

// ---------------------------------------------------------------------------------------------
// Scopes and keys on spans: hashes unless asked otherwise

/**
 * Hashes of scopes already seen. Scopes are tenants, few and repeated on every span, so a hash is
 * computed once per tenant, not once per store call; bounded, since a scope comes from a request.
 */
const scopeHashes = new Map<string, string>();
const SCOPE_HASHES_MAX = 10_000;

/**
 * What `idemkit.scope` says of a scope: `sha256:` + 32 hex of it (stable, so spans still group by
 * tenant), or the scope as it is when asked. The scope is stored and shown to operators, and
 * should be a tenant id; a hook that returns a credential anyway must not put it in every trace.
 */
function scopeValue(scope: string, raw: boolean): string {
  if (raw) return scope;
  let hash = scopeHashes.get(scope);
  if (hash === undefined) {
    hash = `sha256:${createHash('sha256').update(scope).digest('hex').slice(0, 32)}`;
    if (scopeHashes.size >= SCOPE_HASHES_MAX) scopeHashes.clear();
    scopeHashes.set(scope, hash);
  }
  return hash;
}

/** What the adapter's `redactKeys` makes of a key: `sha256:` + 32 hex. */
const REDACTED_KEY = /^sha256:[0-9a-f]{32}$/;

/**
 * What `idemkit.key` says of a request's key: always its hash of scope and key, `redactedKey`
 * (the value the adapter's events and logs carry with `redactKeys`, so a span, an event and a log
 * line of one request match). An event's key is already that hash under `redactKeys`: it is kept,
 * not hashed twice. (A client key that merely looks like one, with `redactKeys` off, is kept too:
 * it is then 32 hex digits the client chose, which tell nothing a hash would hide.)
 */
function keyValue(scope: string, key: string): string {
  return REDACTED_KEY.test(key) ? key : redactedKey(scope, key);
}

// ---------------------------------------------------------------------------------------------
// Store spans and latency

export interface InstrumentStoreOptions {
  /** @default trace.getTracer('idemkit', version): the global provider's (a no-op one without an SDK) */
  readonly tracer?: Tracer;
  /** @default metrics.getMeter('idemkit', version) */
  readonly meter?: Meter;
  /**
   * Put the request's key on each span as `idemkit.key`: never the key itself, but its hash of
   * scope and key (`sha256:` + 32 hex, `redactedKey(scope, key)` from `idemkit`), the value the
   * adapter's events carry with `redactKeys`, so store spans, request spans and logs correlate.
   * Off, spans carry no key.
   * @default false
   */
  readonly recordKeys?: boolean;
  /**
   * Put the scope on each span (`idemkit.scope`) as it is. Off, `idemkit.scope` is a stable hash
   * of it (`sha256:` + 32 hex): one value per tenant, never the scope's text. Turn it on only when
   * your `scope` hook answers a tenant id your trace backend may hold, never anything derived from
   * a credential.
   * @default false
   */
  readonly rawScope?: boolean;
}

/** `db.system.name` (OpenTelemetry database semantic conventions) of the built-in stores. */
const DB_SYSTEMS: Readonly<Record<string, string>> = { postgres: 'postgresql', mysql: 'mysql', sqlite: 'sqlite', redis: 'redis' };

/** Store methods that get a span, by the operation name spans and metrics give them. */
const OPERATIONS: Readonly<Record<string, string>> = {
  claim: 'claim',
  renew: 'renew',
  checkpoint: 'checkpoint',
  complete: 'complete',
  release: 'release',
  get: 'get',
  reap: 'reap',
  listAbandoned: 'list_abandoned',
  beginTransaction: 'begin_transaction',
};
const TX_OPERATIONS: Readonly<Record<string, string>> = { complete: 'complete', checkpoint: 'checkpoint', commit: 'commit', rollback: 'rollback' };

/** What `error.type` says of an error: idemkit's stable code, else the class name. */
function errorType(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code !== '') return code;
  if (error instanceof Error) return error.name;
  return '_OTHER';
}

interface StoreInstruments {
  readonly tracer: Tracer;
  readonly duration: Histogram;
  readonly recordKeys: boolean;
  readonly rawScope: boolean;
  /** Attributes every span and point of this store carries. */
  readonly base: Attributes;
}

function isRef(value: unknown): value is { scope: string; key: string } {
  return typeof value === 'object' && value !== null && typeof (value as { scope?: unknown }).scope === 'string' && typeof (value as { key?: unknown }).key === 'string';
}

/** What a result tells a span: the claim's decision, a refused renewal, how many records reaped. */
function resultAttributes(operation: string, result: unknown, span: Span): void {
  if (operation === 'claim' && typeof result === 'object' && result !== null) {
    const claim = result as { kind?: unknown; takeover?: unknown };
    if (typeof claim.kind === 'string') span.setAttribute('idemkit.claim.result', claim.kind);
    if (claim.takeover === true) span.setAttribute('idemkit.takeover', true);
  } else if (operation === 'renew' && typeof result === 'boolean') {
    span.setAttribute('idemkit.renewed', result);
  } else if (operation === 'reap' && typeof result === 'number') {
    span.setAttribute('idemkit.reaped', result);
  }
}

function traced<A extends unknown[], R>(
  instruments: StoreInstruments,
  operation: string,
  transaction: boolean,
  method: (...args: A) => R,
  self: object,
): (...args: A) => R {
  return function (this: unknown, ...args: A): R {
    // Copies, then assignments: `{ ...base, more }` costs microseconds on Node 20 (docs/performance.md).
    const attributes: Attributes = Object.assign({}, instruments.base);
    attributes['idemkit.store.operation'] = operation;
    if (transaction) attributes['idemkit.store.transaction'] = true;
    const ref = args[0];
    if (isRef(ref)) {
      attributes['idemkit.scope'] = scopeValue(ref.scope, instruments.rawScope);
      if (instruments.recordKeys) attributes['idemkit.key'] = redactedKey(ref.scope, ref.key);
    }
    const span = instruments.tracer.startSpan(`idemkit.store.${operation}`, { kind: SpanKind.CLIENT, attributes });
    const started = performance.now();
    const points: Attributes = Object.assign({}, instruments.base);
    points['idemkit.store.operation'] = operation;
    const ok = (result: unknown) => {
      resultAttributes(operation, result, span);
      instruments.duration.record((performance.now() - started) / 1000, points);
      span.end();
    };
    const failed = (error: unknown) => {
      const type = errorType(error);
      span.setAttribute('error.type', type);
      if (error instanceof Error) span.recordException(error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
      instruments.duration.record((performance.now() - started) / 1000, Object.assign({}, points, { 'error.type': type }));
      span.end();
    };
    let result: R;
    try {
      // The span is active while the store works, so a driver's own spans (pg, ioredis) nest under it.
      result = context.with(trace.setSpan(context.active(), span), () => method.apply(self, args));
    } catch (error) {
      failed(error);
      throw error;
    }
    if (result instanceof Promise) {
      return result.then(
        (value: unknown) => {
          ok(value);
          return value;
        },
        (error: unknown) => {
          failed(error);
          throw error;
        },
      ) as R;
    }
    ok(result);
    return result;
  };
}

/** A proxy over `target` whose listed methods are traced; everything else is forwarded as it is. */
function wrap<T extends object>(
  target: T,
  operations: Readonly<Record<string, string>>,
  transaction: boolean,
  instruments: StoreInstruments,
  after?: (name: string, method: (...args: unknown[]) => unknown) => (...args: unknown[]) => unknown,
  outer?: OuterWrapper,
): T {
  const cache = new Map<PropertyKey, unknown>();
  return new Proxy(target, {
    get(object, property) {
      if (property === OUTER_WRAPPER && outer !== undefined) return outer;
      const value = Reflect.get(object, property, object) as unknown;
      if (typeof value !== 'function') return value;
      const known = cache.get(property);
      if (known !== undefined) return known;
      const operation = typeof property === 'string' && Object.hasOwn(operations, property) ? operations[property] : undefined;
      let method = value as (...args: unknown[]) => unknown;
      if (operation !== undefined) {
        method = traced(instruments, operation, transaction, method, object);
        if (after) method = after(property as string, method);
      } else {
        method = method.bind(object) as (...args: unknown[]) => unknown;
      }
      cache.set(property, method);
      return method;
    },
  });
}

/**
 * The same store, with a span per operation (`idemkit.store.claim`, `…complete`, `…release`,
 * `…renew`, …, kind CLIENT, a child of the active span) and the
 * `idemkit.store.operation.duration` histogram (seconds; attributes `idemkit.store.name`,
 * `idemkit.store.operation`, `db.system.name` for the built-in SQL and Redis stores, and
 * `error.type` when it failed). A failure is recorded on its span (exception event, status ERROR)
 * and thrown on unchanged.
 *
 * Everything else the store has is forwarded: `beginTransaction` (its transaction's complete,
 * checkpoint, commit and rollback get spans too), `listAbandoned`, `verify`, `migrate`, `close`, …
 * so `transactional: true` and the completer work as with the store itself.
 *
 * `idemkit.scope` is a hash of the scope unless `rawScope`; the key is on spans only with
 * `recordKeys`, and then as its hash. An ORM bridge may wrap the instrumented store or be wrapped
 * by it (`knexTransactions(instrumentStore(store), knex)` or `instrumentStore(knexTransactions(store,
 * knex))`): either way the ORM's transactions get their spans.
 */
export function instrumentStore<S extends IdempotencyStore>(store: S, options: InstrumentStoreOptions = {}): S {
  if (!store || typeof store.claim !== 'function') throw new InvalidOptionError('store', 'instrumentStore() expected an IdempotencyStore');
  const read = optionReader('instrumentStore()', options);
  const tracer = read.driver('tracer', ['startSpan'], 'an OpenTelemetry Tracer', { optional: true }) ?? defaultTracer();
  const meter = read.driver('meter', ['createHistogram', 'createCounter'], 'an OpenTelemetry Meter', { optional: true }) ?? defaultMeter();
  const recordKeys = read.boolean('recordKeys', { default: false });
  const rawScope = read.boolean('rawScope', { default: false });
  read.done();
  const duration = meter.createHistogram(TELEMETRY_NAMES.storeDuration, {
    description: 'Duration of idemkit store operations.',
    unit: 's',
    advice: { explicitBucketBoundaries: [...DURATION_BUCKETS_S] },
  });
  return instrumented(store, { tracer, duration, recordKeys, rawScope });
}

/** `store` with spans and points from these instruments (also what an ORM bridge beneath asks for). */
function instrumented<S extends IdempotencyStore>(store: S, shared: Omit<StoreInstruments, 'base'>): S {
  const base: Attributes = { 'idemkit.store.name': store.name };
  const system = DB_SYSTEMS[store.name];
  if (system !== undefined) base['db.system.name'] = system;
  const instruments: StoreInstruments = { tracer: shared.tracer, duration: shared.duration, recordKeys: shared.recordKeys, rawScope: shared.rawScope, base };
  const outer: OuterWrapper = { inner: store, rewrap: (other) => instrumented(other, shared) };
  return wrap(
    store,
    OPERATIONS,
    false,
    instruments,
    (name, method) => {
      if (name !== 'beginTransaction') return method;
      return (...args: unknown[]) => {
        const opened = method(...args) as Promise<StoreTransaction<unknown>>;
        return opened.then((transaction) => wrap(transaction, TX_OPERATIONS, true, instruments));
      };
    },
    outer,
  );
}

// ---------------------------------------------------------------------------------------------
// Decisions: request span attributes and counters

export interface TelemetryEventsOptions {
  /** @default metrics.getMeter('idemkit', version) */
  readonly meter?: Meter;
  /**
   * Put the request's key on its span as `idemkit.key`: never the key itself, but its hash of
   * scope and key (`sha256:` + 32 hex), the value the adapter's events carry with `redactKeys` and
   * `instrumentStore({ recordKeys: true })` puts on store spans. Off, the span carries no key.
   * @default false
   */
  readonly recordKeys?: boolean;
  /**
   * Put the scope on the request span (`idemkit.scope`, and on counters with `scopeAttribute`) as
   * it is. Off, it is a stable hash of the scope (`sha256:` + 32 hex): one value per tenant, never
   * the scope's text. Turn it on only when your `scope` hook answers a tenant id your telemetry
   * backend may hold, never anything derived from a credential.
   * @default false
   */
  readonly rawScope?: boolean;
  /**
   * Add `idemkit.scope` (its hash unless `rawScope`) to the counters' attributes. The scope is
   * usually the tenant: one series per tenant and outcome, which a metrics backend may not want.
   * Spans carry it regardless.
   * @default false
   */
  readonly scopeAttribute?: boolean;
}

/** What a request ended as, on its span (`idemkit.outcome`) and on `idemkit.requests`. */
export type RequestOutcome = 'executed' | 'replayed' | 'conflict' | 'mismatch' | 'rejected';

/**
 * Listeners for the adapters' `events` option that record each decision on the active span (the
 * request's: `idemkit.outcome`, `idemkit.scope`, `idemkit.completion`, …, and span events for a
 * take-over and a lost lease) and count it: `idemkit.requests` by `idemkit.outcome`,
 * `idemkit.completions` by `idemkit.completion`, `idemkit.takeovers`, `idemkit.lease_losses`,
 * `idemkit.store.errors`, and the `idemkit.handler.duration` histogram. Combine it with listeners
 * of your own with `combineEvents`.
 */
export function telemetryEvents(options: TelemetryEventsOptions = {}): Required<IdempotencyEvents> {
  const read = optionReader('telemetryEvents()', options);
  const meter = read.driver('meter', ['createHistogram', 'createCounter'], 'an OpenTelemetry Meter', { optional: true }) ?? defaultMeter();
  const recordKeys = read.boolean('recordKeys', { default: false });
  const rawScope = read.boolean('rawScope', { default: false });
  const scopeAttribute = read.boolean('scopeAttribute', { default: false });
  read.done();

  const requests: Counter = meter.createCounter(TELEMETRY_NAMES.requests, { description: 'Requests idemkit decided on, by outcome.', unit: '{request}' });
  const completions: Counter = meter.createCounter(TELEMETRY_NAMES.completions, { description: 'How claimed requests ended, by completion.', unit: '{request}' });
  const takeovers: Counter = meter.createCounter(TELEMETRY_NAMES.takeovers, { description: 'Claims that took over a key whose lease had run out.', unit: '{request}' });
  const leaseLosses: Counter = meter.createCounter(TELEMETRY_NAMES.leaseLosses, { description: 'Requests whose lease was found lost.', unit: '{request}' });
  const storeErrors: Counter = meter.createCounter(TELEMETRY_NAMES.storeErrors, { description: 'Store operations that failed or timed out on the request path.', unit: '{error}' });
  const handlerDuration: Histogram = meter.createHistogram(TELEMETRY_NAMES.handlerDuration, {
    description: 'From the claim to the handler answer, for claimed requests.',
    unit: 's',
    advice: { explicitBucketBoundaries: [...DURATION_BUCKETS_S] },
  });

  const scoped = (attributes: Attributes, scope: string | undefined): Attributes => {
    if (scopeAttribute && scope !== undefined) attributes['idemkit.scope'] = scopeValue(scope, rawScope);
    return attributes;
  };
  /** Sets the outcome on the request's span (the active one) and counts it. */
  const decided = (outcome: RequestOutcome, request: { scope?: string; key?: string; method: string }, more: Attributes = {}) => {
    requests.add(1, scoped({ 'idemkit.outcome': outcome }, request.scope));
    const span = trace.getActiveSpan();
    if (span === undefined || !span.isRecording()) return;
    span.setAttribute('idemkit.outcome', outcome);
    if (request.scope !== undefined) {
      span.setAttribute('idemkit.scope', scopeValue(request.scope, rawScope));
      if (recordKeys && request.key !== undefined) span.setAttribute('idemkit.key', keyValue(request.scope, request.key));
    }
    span.setAttributes(more);
  };

  return {
    execute: (event) => decided('executed', event, { 'idemkit.takeover': event.takeover }),
    takeover: (event) => {
      takeovers.add(1, scoped({}, event.scope));
      const attributes: Attributes = {};
      if (event.resumeFrom !== undefined) attributes['idemkit.resume_from'] = event.resumeFrom;
      trace.getActiveSpan()?.addEvent('idemkit.takeover', attributes);
    },
    replay: (event) => decided('replayed', event),
    conflict: (event) => decided('conflict', event),
    mismatch: (event) => decided('mismatch', event),
    rejected: (event) => decided('rejected', event, { 'idemkit.error.code': event.code }),
    leaseLost: (event: LeaseLostEvent) => {
      leaseLosses.add(1, scoped({ 'idemkit.lease_lost.during': event.during }, event.scope));
      trace.getActiveSpan()?.addEvent('idemkit.lease_lost', { 'idemkit.lease_lost.during': event.during });
    },
    complete: (event: CompleteEvent) => {
      completions.add(1, scoped({ 'idemkit.completion': event.outcome }, event.scope));
      handlerDuration.record(event.handlerMs / 1000, scoped({ 'idemkit.completion': event.outcome }, event.scope));
      const span = trace.getActiveSpan();
      if (span === undefined || !span.isRecording()) return;
      span.setAttribute('idemkit.completion', event.outcome);
      if (event.outcome === 'omitted') span.setAttribute('idemkit.response.body_omitted', true);
    },
    storeError: (event) => {
      storeErrors.add(1, scoped({ 'idemkit.store.operation': event.operation, 'error.type': errorType(event.error) }, event.request?.scope));
    },
  };
}

/**
 * One `events` object that calls each of `listeners` in turn, for each event any of them listens
 * to (an event none of them listens to stays unlistened, and costs nothing).
 */
export function combineEvents(...listeners: ReadonlyArray<IdempotencyEvents | undefined>): IdempotencyEvents {
  const combined: Record<string, (event: never) => void> = {};
  for (const name of EVENT_NAMES) {
    const each = listeners.map((l) => l?.[name] as ((event: never) => void) | undefined).filter((f): f is (event: never) => void => f !== undefined);
    if (each.length === 1) combined[name] = each[0]!;
    else if (each.length > 1) {
      combined[name] = (event: never) => {
        // Each listener hears the event even when one before it threw; the first error is reported.
        let failure: { error: unknown } | undefined;
        for (const listener of each) {
          try {
            listener(event);
          } catch (error) {
            failure ??= { error };
          }
        }
        if (failure) throw failure.error;
      };
    }
  }
  return combined as IdempotencyEvents;
}
