/**
 * The OpenTelemetry SDK with in-memory exporters (no collector): finished spans are kept in order,
 * metrics are read on demand (`forceFlush`, never a timer). The AsyncLocalStorage context manager
 * is the one a Node application registers, so a request's span is active inside the handler.
 */
import { context, metrics, trace } from '@opentelemetry/api';
import type { Attributes } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import type { DataPoint, Histogram, MetricData } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';

export interface TestSdk {
  readonly tracerProvider: BasicTracerProvider;
  readonly meterProvider: MeterProvider;
  /** Finished spans, in the order they ended. */
  spans(): ReadableSpan[];
  /** Every metric as of now (cumulative since the start or the last `reset`). */
  collect(): Promise<MetricData[]>;
  /** The data points of one metric, as `[attributes, value]`; [] when it has none. */
  points(name: string): Promise<Array<[Attributes, number | Histogram]>>;
  /** The sum of a counter's points whose attributes include `match`. */
  count(name: string, match?: Attributes): Promise<number>;
  /** Forget the spans recorded so far. */
  clearSpans(): void;
  /** Unregister the global providers and context manager, and shut the SDK down. */
  shutdown(): Promise<void>;
}

/** Registers the SDK globally (tracer, meter, context manager): idemkit's defaults find it. */
export function startTestSdk(): TestSdk {
  const spanExporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spanExporter)] });
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  // The interval never fires during a test: every read is a forceFlush.
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 2_000_000_000, exportTimeoutMillis: 30_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  trace.setGlobalTracerProvider(tracerProvider);
  metrics.setGlobalMeterProvider(meterProvider);

  const collect = async (): Promise<MetricData[]> => {
    metricExporter.reset();
    await reader.forceFlush();
    return metricExporter.getMetrics().flatMap((resource) => resource.scopeMetrics.flatMap((scope) => scope.metrics));
  };
  const points = async (name: string): Promise<Array<[Attributes, number | Histogram]>> => {
    const found = (await collect()).filter((metric) => metric.descriptor.name === name);
    return found.flatMap((metric) => (metric.dataPoints as Array<DataPoint<number | Histogram>>).map((point): [Attributes, number | Histogram] => [point.attributes, point.value]));
  };
  return {
    tracerProvider,
    meterProvider,
    spans: () => spanExporter.getFinishedSpans(),
    collect,
    points,
    count: async (name, match = {}) => {
      let total = 0;
      for (const [attributes, value] of await points(name)) {
        if (Object.entries(match).every(([k, v]) => attributes[k] === v)) total += value as number;
      }
      return total;
    },
    clearSpans: () => spanExporter.reset(),
    shutdown: async () => {
      trace.disable();
      metrics.disable();
      context.disable();
      await tracerProvider.shutdown();
      await meterProvider.shutdown();
    },
  };
}
