/** Turns measured configurations into comparison rows, target checks and a Markdown report. */
import type { LoadSample } from './harness.js';
import type { RawResults } from './raw-store.js';
import type { Framework, Impl, StoreKind, Workload } from './shared.js';

/** One server configuration: warm-up, then `runs` measured runs; the medians summarise them. */
export interface ConfigResult {
  readonly impl: Impl;
  readonly framework: Framework;
  readonly store: StoreKind;
  readonly workload: Workload;
  readonly delayMs: number;
  readonly runs: readonly LoadSample[];
  readonly reqPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly serverCpuMicrosPerReq: number;
  readonly serverSysMicrosPerReq: number;
  readonly serverCpuPercent: number;
  readonly otherCpuPercent: number | undefined;
  /** (max − min) / median of the runs' req/s, in %. */
  readonly spreadPercent: number;
  /** Runs thrown away and redone because other processes were busy during them. */
  readonly discardedRuns: number;
  /** Why the measurement cannot be trusted (non-2xx answers, socket errors, wrong execution count). */
  readonly problems: readonly string[];
  /** Answers per HTTP status over all measured runs. */
  readonly statuses: Readonly<Record<string, number>>;
  /** Double executions seen during the measured runs (contention workload; 0 elsewhere). */
  readonly duplicates: number;
  /**
   * µs per request spent inside the store's claim and complete in the server, during one more run
   * after the timed ones (in-process stores only; see `storeTimeInServer` in run.ts).
   */
  readonly storeMicrosInServer?: number;
  /**
   * The bare framework measured next to this configuration: one run just before its runs and one
   * just after, averaged. A machine that slows down while the bench runs (seen here: the same bare
   * server 40 % slower twenty minutes in) then moves both sides of a ratio, not one.
   */
  readonly baseline?: Baseline;
}

/** What a ratio is taken against. */
export interface Baseline {
  readonly reqPerSec: number;
  readonly p99Ms: number;
  readonly serverCpuMicrosPerReq: number;
  readonly serverSysMicrosPerReq: number;
}

/** The bare figures to compare `c` with: its adjacent baseline, else the bare configuration of its group. */
export function baselineOf(configs: readonly ConfigResult[], c: ConfigResult): Baseline | undefined {
  if (c.baseline) return c.baseline;
  return configs.find((b) => b.impl === 'bare' && b.framework === c.framework && b.workload === c.workload && b.delayMs === c.delayMs);
}

export type Check = 'PASS' | 'MISS';

export interface Row {
  readonly framework: Framework;
  readonly store: Exclude<StoreKind, 'none'>;
  readonly workload: Workload;
  readonly delayMs: number;
  readonly bareReqPerSec: number;
  readonly withReqPerSec: number;
  /** with / bare, in %. */
  readonly ratioPercent: number;
  readonly bareP99Ms: number;
  readonly withP99Ms: number;
  /** (1/with − 1/bare) × 1e6: the time the middleware adds per request on the single-threaded server. */
  readonly addedMicros: number;
  /** The same, measured directly: server CPU µs per request with, minus bare (all threads, user + system). */
  readonly addedCpuMicros: number;
  /** The kernel (system) part of addedCpuMicros. */
  readonly addedSysMicros: number;
  /** The raw store time of this workload's store operations (0 for no-key). */
  readonly rawStoreMicros: number;
  /** 1.3 × raw + 15 µs. */
  readonly budgetMicros: number;
  /** The same store operations timed inside the server under this load (in-process stores only). */
  readonly storeMicrosInServer: number | undefined;
  readonly addedCheck: Check | undefined;
  readonly ratioTargetPercent: number | undefined;
  readonly ratioCheck: Check | undefined;
}

/** Throughput targets: memory store, with/bare. */
const RATIO_TARGETS: Partial<Record<`${Framework}/${Workload}`, number>> = {
  'express/new-key': 85,
  'express/replay': 90,
  'fastify/new-key': 70,
  'fastify/replay': 80,
};

export function buildRows(configs: readonly ConfigResult[], raw: RawResults): Row[] {
  const rows: Row[] = [];
  for (const withMw of configs) {
    if (withMw.store === 'none') continue;
    const bare = baselineOf(configs, withMw);
    if (!bare) continue;
    const rawStore = raw.stores.find((s) => s.store === withMw.store);
    const rawStoreMicros = withMw.workload === 'new-key' ? rawStore?.newKeyMicros : withMw.workload === 'replay' ? rawStore?.replayMicros : 0;
    const budgetMicros = 1.3 * (rawStoreMicros ?? NaN) + 15;
    const addedMicros = (1 / withMw.reqPerSec - 1 / bare.reqPerSec) * 1e6;
    // Contention answers most requests with 409 without a store write: no raw-store budget applies.
    const cpuBound = withMw.delayMs === 0 && withMw.workload !== 'contention';
    const target = withMw.store === 'memory' && cpuBound ? RATIO_TARGETS[`${withMw.framework}/${withMw.workload}`] : undefined;
    const ratioPercent = (100 * withMw.reqPerSec) / bare.reqPerSec;
    rows.push({
      framework: withMw.framework,
      store: withMw.store,
      workload: withMw.workload,
      delayMs: withMw.delayMs,
      bareReqPerSec: bare.reqPerSec,
      withReqPerSec: withMw.reqPerSec,
      ratioPercent,
      bareP99Ms: bare.p99Ms,
      withP99Ms: withMw.p99Ms,
      addedMicros,
      addedCpuMicros: withMw.serverCpuMicrosPerReq - bare.serverCpuMicrosPerReq,
      addedSysMicros: withMw.serverSysMicrosPerReq - bare.serverSysMicrosPerReq,
      rawStoreMicros: rawStoreMicros ?? NaN,
      budgetMicros,
      storeMicrosInServer: withMw.storeMicrosInServer,
      // With a 5 ms handler the server is not CPU-bound, so throughput says nothing about CPU time.
      addedCheck: cpuBound ? (addedMicros <= budgetMicros ? 'PASS' : 'MISS') : undefined,
      ratioTargetPercent: target,
      ratioCheck: target === undefined ? undefined : ratioPercent >= target ? 'PASS' : 'MISS',
    });
  }
  return rows;
}

const int = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');
const fixed = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');
const ms = (n: number) => (Number.isFinite(n) ? `${n}` : 'n/a');

export interface ReportMeta {
  readonly date: string;
  readonly node: string;
  readonly cpus: string;
  readonly commit: string;
  readonly durationSec: number;
  readonly runs: number;
  readonly warmupSec: number;
  readonly connections: number;
}

export function toMarkdown(meta: ReportMeta, raw: RawResults, configs: readonly ConfigResult[], rows: readonly Row[]): string {
  const out: string[] = [];
  out.push('# idemkit middleware overhead', '');
  out.push(
    `${meta.date} · Node ${meta.node} · ${meta.cpus} · commit ${meta.commit} · ${meta.connections} connections, ` +
      `pipelining 1 · warm-up ${meta.warmupSec} s, then ${meta.runs} runs × ${meta.durationSec} s per configuration · medians`,
    '',
  );

  out.push('## Raw store time (in-process, no HTTP)', '');
  out.push(`Mean per operation over ${int(raw.iterations)} iterations, median of ${raw.repetitions} repetitions.`, '');
  out.push(
    '| store | new key: claim + complete (µs) | replay: claim on a completed key (µs) | round trips: new key / replay |',
    '|---|---:|---:|---:|',
  );
  for (const s of raw.stores) {
    const trips = s.newKeyRoundTrips === 0 && s.replayRoundTrips === 0 ? 'in process' : `${s.newKeyRoundTrips} / ${s.replayRoundTrips}`;
    out.push(`| ${s.store} | ${fixed(s.newKeyMicros, 2)} | ${fixed(s.replayMicros, 2)} | ${trips} |`);
  }
  out.push('', `Fingerprint of the bench request (canonical JSON + SHA-256), for reference: ${fixed(raw.fingerprintMicros, 2)} µs.`, '');

  out.push('## Middleware against the bare framework (trivial handler)', '');
  out.push(
    '| framework | store | workload | bare req/s | with req/s | ratio | p99 bare → with (ms) | added µs | CPU Δ µs (kernel) | raw store µs | added ≤ 1.3×raw+15 | ratio target |',
    '|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|',
  );
  for (const r of rows.filter((row) => row.delayMs === 0)) {
    const added = r.addedCheck === undefined ? '—' : `${r.addedCheck} (${r.addedCheck === 'PASS' ? '≤' : '>'} ${fixed(r.budgetMicros)})`;
    const ratio = r.ratioCheck === undefined ? '—' : `${r.ratioCheck} (≥ ${r.ratioTargetPercent} %)`;
    out.push(
      `| ${r.framework} | ${r.store} | ${r.workload} | ${int(r.bareReqPerSec)} | ${int(r.withReqPerSec)} | ${fixed(r.ratioPercent)} % | ` +
        `${ms(r.bareP99Ms)} → ${ms(r.withP99Ms)} | ${fixed(r.addedMicros)} | ${fixed(r.addedCpuMicros)} (${fixed(r.addedSysMicros)}) | ${fixed(r.rawStoreMicros, 2)} | ${added} | ${ratio} |`,
    );
  }
  out.push('');

  const delayed = rows.filter((row) => row.delayMs > 0);
  if (delayed.length > 0) {
    out.push(`## With a ${delayed[0]!.delayMs} ms handler (new key per request)`, '');
    out.push(
      '50 connections over a 5 ms handler cap throughput at 10 000 req/s. Where the bare server stays under ~100 % CPU, ' +
        'the added CPU time is absorbed and the difference shows in latency; where it is at ~100 %, the server is still the bottleneck.',
      '',
    );
    out.push(
      '| framework | store | bare req/s | with req/s | ratio | p99 bare → with (ms) | server CPU bare → with | CPU Δ µs |',
      '|---|---|---:|---:|---:|---:|---:|---:|',
    );
    for (const r of delayed) {
      const cpu = (store: StoreKind) =>
        configs.find((c) => c.framework === r.framework && c.store === store && c.workload === r.workload && c.delayMs === r.delayMs)
          ?.serverCpuPercent ?? NaN;
      out.push(
        `| ${r.framework} | ${r.store} | ${int(r.bareReqPerSec)} | ${int(r.withReqPerSec)} | ${fixed(r.ratioPercent)} % | ` +
          `${ms(r.bareP99Ms)} → ${ms(r.withP99Ms)} | ${fixed(cpu('none'), 0)} % → ${fixed(cpu(r.store), 0)} % | ${fixed(r.addedCpuMicros)} |`,
      );
    }
    out.push('');
  }

  out.push('## Every configuration', '');
  out.push(
    '| framework | store | workload | handler | req/s (median) | spread | p50 / p99 (ms) | server CPU µs/req (kernel) | server CPU | other CPU | problems |',
    '|---|---|---|---|---:|---:|---:|---:|---:|---:|---|',
  );
  for (const c of configs) {
    out.push(
      `| ${c.framework} | ${c.store} | ${c.workload} | ${c.delayMs} ms | ${int(c.reqPerSec)} | ${fixed(c.spreadPercent)} % | ` +
        `${ms(c.p50Ms)} / ${ms(c.p99Ms)} | ${fixed(c.serverCpuMicrosPerReq)} (${fixed(c.serverSysMicrosPerReq)}) | ${fixed(c.serverCpuPercent, 0)} % | ` +
        `${c.otherCpuPercent === undefined ? 'n/a' : `${fixed(c.otherCpuPercent, 0)} %`}` +
        `${c.discardedRuns > 0 ? ` (${c.discardedRuns} noisy run(s) redone)` : ''} | ${c.problems.join('; ') || '—'} |`,
    );
  }
  out.push('');
  const noisy = configs.filter((c) => c.spreadPercent > 10 || (c.otherCpuPercent ?? 0) > 15);
  if (noisy.length > 0) {
    out.push(
      `Noise: ${noisy.length} configuration(s) had a run-to-run spread over 10 % or other processes using over 15 % of a core; ` +
        'rerun on a quiet machine before trusting small differences.',
      '',
    );
  }
  return out.join('\n');
}
