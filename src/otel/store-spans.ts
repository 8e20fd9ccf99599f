/**
 * Store spans and latency: `instrumentStore` wraps a store in a proxy that gives each operation a
 * span and a point on the `idemkit.store.operation.duration` histogram.
 */
import type { Attributes, Histogram, Meter, Span, Tracer } from '@opentelemetry/api';
import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { redactedKey } from '../core/events.js';
import { InvalidOptionError } from '../core/errors.js';
import { optionReader } from '../core/option-reader.js';
import type { IdempotencyStore, StoreTransaction } from '../core/store.js';
import type { OuterWrapper } from '../core/store-wrapper.js';
import { OUTER_WRAPPER } from '../core/store-wrapper.js';
import { errorType, scopeValue } from './attributes.js';
import { defaultMeter, defaultTracer, DURATION_BUCKETS_S, TELEMETRY_NAMES } from './names.js';

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
