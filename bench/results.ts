/**
 * What one `npm run bench` run measured (bench/results/latest.json holds it whole), and the
 * figures derived from it that the report (markdown.ts) and the chart (chart.ts) both show.
 */
import type { LoadSample } from './harness.js';
import type { RawResults } from './raw-store.js';
import type { BenchOptions, FrameworkPlan } from './options.js';
import type { Framework, Impl, StoreKind, Workload } from './shared.js';

export interface Subject {
  readonly impl: Impl;
  readonly store: StoreKind;
}

export interface RaceEntry {
  readonly framework: Framework;
  readonly impl: Impl;
  /** The implementation, with a variant when it is wired differently (`powertools (no-context)`). */
  readonly name: string;
  readonly store: StoreKind;
  readonly notApplicable?: string;
  /** Distinct originals beyond one per round, as clients saw them (idemkit check's count). */
  readonly doubleExecutions?: number;
  /** Handler executions beyond one per round, counted by the server itself. */
  readonly serverDoubleExecutions?: number;
  readonly hangs?: number;
  readonly errors?: number;
  readonly statuses?: Readonly<Record<string, number>>;
  /** Rounds whose later request did not replay an answer given during the round. */
  readonly laterReplayMismatches?: number;
  readonly ms?: number;
}

export interface LatencyResult {
  readonly framework: Framework;
  readonly workload: 'new-key' | 'replay';
  readonly impl: Impl;
  readonly store: StoreKind;
  /** The fixed rate: half the bare framework's maximum for this workload. */
  readonly rate: number;
  readonly p50Micros: number;
  readonly p99Micros: number;
  readonly achievedRate: number;
  readonly errors: number;
}

/** The run's settings as asked (BenchOptions), and where and when it ran. */
export interface BenchMeta
  extends Pick<BenchOptions, 'durationSec' | 'runs' | 'warmupSec' | 'latencyRuns' | 'raceConcurrency' | 'raceRounds' | 'raceDelayMs' | 'frameworks'> {
  readonly date: string;
  readonly node: string;
  readonly cpus: string;
  readonly commit: string;
  readonly connections: number;
  readonly memory: string;
  readonly command: string;
  readonly elapsedSec: number;
  readonly estimatedSec: number;
  readonly loadAverage: string;
  readonly versions: Readonly<Record<string, string>>;
  readonly plans: readonly string[];
  readonly stores: readonly StoreKind[];
  readonly peers: readonly Impl[];
  /** What each framework was timed on (absent in runs from before Koa and Nest were measured). */
  readonly matrix?: readonly FrameworkPlan[];
}


export interface BenchResults {
  readonly meta: BenchMeta;
  readonly raw: RawResults;
  readonly races: readonly RaceEntry[];
  readonly configs: readonly ConfigResult[];
  readonly latencies: readonly LatencyResult[];
  readonly skipped: ReadonlyArray<{ framework: Framework; plan: string; impl: Impl; store: StoreKind; reason: string }>;
}

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

/** Above this median CPU use by other processes (% of a core), the run is marked preliminary. */
export const BUSY_PERCENT = 15;

export function busyPercent(configs: readonly ConfigResult[]): number {
  const others = configs.map((c) => c.otherCpuPercent).filter((v): v is number => v !== undefined);
  return others.length > 0 ? [...others].sort((a, b) => a - b)[others.length >> 1]! : 0;
}

/** Time added per request on a saturated single-threaded server: 1/with − 1/bare, in µs. */
export const addedMicros = (withRps: number, bareRps: number) => (1 / withRps - 1 / bareRps) * 1e6;

/** Time `c` adds per request against its own baseline (the bare runs measured next to it). */
export function addedOver(configs: readonly ConfigResult[], c: ConfigResult): number | undefined {
  const bare = baselineOf(configs, c);
  return bare && addedMicros(c.reqPerSec, bare.reqPerSec);
}

/** `c`'s throughput over its own baseline's. */
export function ratioOver(configs: readonly ConfigResult[], c: ConfigResult): number | undefined {
  const bare = baselineOf(configs, c);
  return bare && c.reqPerSec / bare.reqPerSec;
}

/** Race-correct: checked, and no double execution, hang or error. undefined: not checked. */
export function raceCorrect(races: readonly RaceEntry[], framework: Framework, impl: Impl, store: StoreKind): boolean | undefined {
  const entry = races.find((r) => r.framework === framework && r.impl === impl && r.store === store && r.name === impl);
  if (!entry || entry.notApplicable !== undefined) return undefined;
  return entry.doubleExecutions === 0 && entry.serverDoubleExecutions === 0 && entry.hangs === 0 && entry.errors === 0;
}

/** A paced run that could not keep its rate (5 % short): its latency is queueing. */
export function isSaturated(l: LatencyResult): boolean {
  return l.achievedRate < 0.95 * l.rate;
}

export const WORKLOAD_TITLE: Record<Workload, string> = {
  'new-key': 'a new key per request',
  replay: 'replays (16 completed keys)',
  contention: 'contention (64 connections on 8 keys at a time)',
  'no-key': 'no key (pass-through)',
};

export const int = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');
export const fixed = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');
export const signed = (n: number, digits = 0) => (Number.isFinite(n) ? `${n >= 0 ? '+' : '−'}${Math.abs(n).toFixed(digits)}` : 'n/a');
