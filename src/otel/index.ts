/**
 * OpenTelemetry for idemkit: spans and a latency histogram for every store operation
 * (`instrumentStore`), and the engine's decisions as attributes on the request's span and as
 * counters (`telemetryEvents`).
 *
 * This entry point imports `@opentelemetry/api` (an optional peer dependency); nothing else in
 * idemkit does, so an application without OpenTelemetry never loads it. With the API installed but
 * no SDK registered, every tracer and meter is the API's no-op one.
 *
 * The parts: names.ts (scope, span and metric names, buckets), attributes.ts (scope and key
 * hashes, error types), store-spans.ts (`instrumentStore`), events.ts (`telemetryEvents`,
 * `combineEvents`).
 */
export { DURATION_BUCKETS_S, INSTRUMENTATION_NAME, TELEMETRY_NAMES } from './names.js';
export type { InstrumentStoreOptions } from './store-spans.js';
export { instrumentStore } from './store-spans.js';
export type { RequestOutcome, TelemetryEventsOptions } from './events.js';
export { combineEvents, telemetryEvents } from './events.js';
