/**
 * Decisions: `telemetryEvents` records what the engine decided on the request's span and in
 * counters; `combineEvents` lets those listeners sit beside an application's own.
 */
import type { Attributes, Counter, Histogram, Meter } from '@opentelemetry/api';
import { trace } from '@opentelemetry/api';
import type { CompleteEvent, IdempotencyEvents, LeaseLostEvent } from '../core/events.js';
import { EVENT_NAMES } from '../core/events.js';
import { optionReader } from '../core/option-reader.js';
import { errorType, keyValue, scopeValue } from './attributes.js';
import { defaultMeter, DURATION_BUCKETS_S, TELEMETRY_NAMES } from './names.js';

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
