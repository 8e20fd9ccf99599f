/**
 * The names idemkit's telemetry goes by: the instrumentation scope (tracers and meters `idemkit` at
 * the package's version), the span and metric names, and the duration histograms' buckets.
 */
import { createRequire } from 'node:module';
import type { Meter, Tracer } from '@opentelemetry/api';
import { metrics, trace } from '@opentelemetry/api';

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

/** The global provider's tracer and meter (no-op ones without an SDK), when the options name none. */
export const defaultTracer = (): Tracer => trace.getTracer(INSTRUMENTATION_NAME, VERSION);
export const defaultMeter = (): Meter => metrics.getMeter(INSTRUMENTATION_NAME, VERSION);

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
