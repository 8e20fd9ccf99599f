/**
 * What the `events` option and `idemkit/otel` cost on the request path: the engine's decide →
 * finish for new keys (and replays) on the memory store, in process (no HTTP, no sockets, so the
 * engine's own work is all there is to see), with no listener, with `events: {}`, with every
 * listener a no-op, with every listener and `redactKeys`, and with the OpenTelemetry wrapper
 * (`instrumentStore` + `telemetryEvents`) twice: with the API present but no SDK registered (its
 * no-op tracer and meter), and with an SDK recording spans and metrics in memory. The variants run
 * interleaved, round after round, and each is reported as a ratio to the no-listener baseline of
 * the same rounds.
 *
 *   node --conditions=idemkit-source --import tsx bench/events.ts
 *   EVENTS_CALLS=20000 EVENTS_ROUNDS=7
 *
 * Prints one Markdown table for docs/performance.md.
 */
import type { IdempotencyEvents } from 'idemkit';
import { IdempotencyEngine } from 'idemkit/kit';
import type { RequestReader } from 'idemkit/kit';
import { instrumentStore, telemetryEvents } from 'idemkit/otel';
import type { IdempotencyStore } from 'idemkit';
import { memoryStore } from 'idemkit/stores/memory';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';

const CALLS = Number(process.env.EVENTS_CALLS ?? 20_000);
const ROUNDS = Number(process.env.EVENTS_ROUNDS ?? 7);

interface Call {
  readonly key: string;
}

const body = new TextEncoder().encode('{"amount":1200}');
const answer = new TextEncoder().encode('{"ok":true}');
const headers: ReadonlyArray<readonly [string, string]> = [['content-type', 'application/json']];
const reader: RequestReader<Call> = {
  method: () => 'POST',
  header: (call) => call.key,
  path: () => '/orders?x=1',
  contentType: () => 'application/json',
  readBody: () => ({ body }),
};

const noop = () => {};
const everyListener: IdempotencyEvents = {
  execute: noop,
  takeover: noop,
  replay: noop,
  conflict: noop,
  mismatch: noop,
  rejected: noop,
  leaseLost: noop,
  complete: noop,
  storeError: noop,
};

// An SDK of its own (not registered globally, so the no-SDK variant keeps the API's no-op
// providers): spans go to memory, emptied after each round; metrics are read only at shutdown.
const spans = new InMemorySpanExporter();
const sdk = {
  tracer: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }).getTracer('bench'),
  meter: new MeterProvider({
    readers: [new PeriodicExportingMetricReader({ exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE), exportIntervalMillis: 3_600_000 })],
  }).getMeter('bench'),
};

/** Each variant: the store the engine uses, and the options it adds. */
const VARIANTS: Record<string, (store: IdempotencyStore) => { store: IdempotencyStore; events?: IdempotencyEvents; redactKeys?: boolean }> = {
  'no listener': (store) => ({ store }),
  'events: {}': (store) => ({ store, events: {} }),
  'every listener (no-op)': (store) => ({ store, events: everyListener }),
  'every listener + redactKeys': (store) => ({ store, events: everyListener, redactKeys: true }),
  'otel, API without an SDK': (store) => ({ store: instrumentStore(store), events: telemetryEvents() }),
  'otel, in-memory SDK': (store) => ({ store: instrumentStore(store, sdk), events: telemetryEvents({ meter: sdk.meter }) }),
};
type Variant = string;

/** Calls per second for `CALLS` new keys, then as many replays of them. */
async function round(variant: Variant, tag: string): Promise<{ fresh: number; replay: number }> {
  const store = memoryStore({ maxRecords: CALLS * 2 });
  const engine = new IdempotencyEngine<Call>({ scope: () => 't', ...VARIANTS[variant]!(store) });
  const keys = Array.from({ length: CALLS }, (_, i) => ({ key: `${tag}-${i}` }));
  let started = performance.now();
  for (const call of keys) {
    const decision = await engine.decide(call, reader);
    if (decision.kind !== 'execute') throw new Error(`expected execute, got ${decision.kind}`);
    await decision.execution.finish(201, headers, answer);
  }
  const fresh = CALLS / ((performance.now() - started) / 1000);
  started = performance.now();
  for (const call of keys) {
    const decision = await engine.decide(call, reader);
    if (decision.kind !== 'replay') throw new Error(`expected replay, got ${decision.kind}`);
  }
  const replay = CALLS / ((performance.now() - started) / 1000);
  store.close();
  spans.reset();
  return { fresh, replay };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

const names = Object.keys(VARIANTS) as Variant[];
const ratios = new Map<Variant, { fresh: number[]; replay: number[]; freshRate: number[]; replayRate: number[] }>(
  names.map((name) => [name, { fresh: [], replay: [], freshRate: [], replayRate: [] }]),
);
// A warm-up round of each, not counted.
for (const [i, name] of names.entries()) await round(name, `warm-${i}`);
for (let r = 0; r < ROUNDS; r++) {
  // Rotate the order each round, so no variant always runs right after a collection.
  const order = names.map((_, i) => names[(i + r) % names.length]!);
  const results = new Map<Variant, { fresh: number; replay: number }>();
  for (const name of order) results.set(name, await round(name, `r${r}-${names.indexOf(name)}`));
  const base = results.get('no listener')!;
  for (const name of names) {
    const got = results.get(name)!;
    const entry = ratios.get(name)!;
    entry.fresh.push(got.fresh / base.fresh);
    entry.replay.push(got.replay / base.replay);
    entry.freshRate.push(got.fresh);
    entry.replayRate.push(got.replay);
  }
}

const pct = (ratio: number) => `${(ratio * 100).toFixed(1)} %`;
const rate = (value: number) => `${Math.round(value).toLocaleString('en-US')}/s`;
console.log(`| variant | new keys (decide + finish) | vs no listener | replays (decide) | vs no listener |`);
console.log(`|---|---:|---:|---:|---:|`);
for (const name of names) {
  const e = ratios.get(name)!;
  const spread = (values: number[]) => `${pct(Math.min(...values))}–${pct(Math.max(...values))}`;
  console.log(
    `| ${name} | ${rate(median(e.freshRate))} | ${pct(median(e.fresh))} (${spread(e.fresh)}) | ${rate(median(e.replayRate))} | ${pct(median(e.replay))} (${spread(e.replay)}) |`,
  );
}
console.log(`\n${ROUNDS} rounds of ${CALLS.toLocaleString('en-US')} calls each, memory store, Node ${process.version}; ratios are medians of per-round ratios (range in brackets).`);
