/**
 * The service's metrics, for Prometheus: an OpenTelemetry MeterProvider whose reader is the
 * Prometheus exporter, served by the service itself at GET /metrics (no second port). idemkit
 * records through `idemkit/otel`: `instrumentStore` (store latency per operation) and
 * `telemetryEvents` (requests per outcome, completions, take-overs, lease losses).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Meter } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';

export interface Telemetry {
  readonly meter: Meter;
  /** Answers a scrape: the Prometheus text format of every metric recorded so far. */
  scrape(request: IncomingMessage, response: ServerResponse): void;
  shutdown(): Promise<void>;
}

export function startTelemetry(): Telemetry {
  // `target_info` and `otel_scope_*` labels add nothing for a single service scraped by name.
  const exporter = new PrometheusExporter({ preventServerStart: true, withoutTargetInfo: true, withoutScopeInfo: true });
  const provider = new MeterProvider({ readers: [exporter] });
  return {
    meter: provider.getMeter('payments'),
    scrape: (request, response) => exporter.getMetricsRequestHandler(request, response),
    shutdown: () => provider.shutdown(),
  };
}
