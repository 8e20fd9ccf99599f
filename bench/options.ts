/**
 * What `npm run bench` is asked to do: flags (`--quick`, `--estimate`, `--no-race`, …) and the
 * `BENCH_*` environment variables, read and checked once into one plain object that run.ts follows.
 */
import { parseArgs } from 'node:util';
import type { Framework, Impl, StoreKind, Workload } from './shared.js';
import { ALL_STORES, PEERS } from './shared.js';

/** A workload as planned: `new-key-5ms` is the new-key workload with a 5 ms handler. */
export type PlanName = Workload | 'new-key-5ms';
export type ServerStore = Exclude<StoreKind, 'none'>;
export const ALL_FRAMEWORKS: readonly Framework[] = ['fastify', 'express', 'koa', 'nest'];
export const ALL_PLANS: readonly PlanName[] = ['new-key', 'replay', 'contention', 'no-key', 'new-key-5ms'];

/**
 * What Koa and Nest are timed on by default: every workload but the 5 ms handler, on the memory
 * store and Redis. Every workload on every store for all four frameworks would take the default
 * run from ~23 to ~36 min on 2 cores; this keeps it at ~31. A `BENCH_WORKLOADS` (or `--workload`)
 * given explicitly applies to every framework, and so does a `BENCH_STORES` (`all`: every one), so
 * `BENCH_FRAMEWORKS=koa,nest BENCH_WORKLOADS=all BENCH_STORES=all` times their whole matrix. The
 * race check covers every selected store on every framework, whatever the matrix (`stores`).
 */
const KOA_NEST_DEFAULT = { plans: ['new-key', 'replay', 'contention', 'no-key'], stores: ['memory', 'redis'] } as const;
export const REDUCED_MATRIX: Readonly<Partial<Record<Framework, { readonly plans: readonly PlanName[]; readonly stores: readonly ServerStore[] }>>> = {
  koa: KOA_NEST_DEFAULT,
  nest: KOA_NEST_DEFAULT,
};

/** What one framework is timed on. */
export interface FrameworkPlan {
  readonly framework: Framework;
  readonly plans: readonly PlanName[];
  readonly stores: readonly ServerStore[];
}

export interface BenchOptions {
  /** Seconds per measured run. */
  readonly durationSec: number;
  /** Measured runs per configuration. */
  readonly runs: number;
  readonly warmupSec: number;
  readonly latencyRuns: number;
  readonly rawIterations: number;
  readonly raceConcurrency: number;
  readonly raceRounds: number;
  /** The race check's handler takes this long, so duplicates overlap an execution in progress. */
  readonly raceDelayMs: number;
  /** A run during which other processes used more than this % of a core is discarded and redone. */
  readonly noiseLimit: number;
  readonly quietWaitMs: number;
  readonly frameworks: readonly Framework[];
  /** The workloads selected (`BENCH_WORKLOADS`, or every one). A framework's own are in `matrix`. */
  readonly plans: readonly PlanName[];
  /** The stores selected (`BENCH_STORES`, or every one): the race check covers them on every framework. */
  readonly stores: readonly ServerStore[];
  /** Per framework, in `frameworks` order: the workloads and stores it is timed on (REDUCED_MATRIX). */
  readonly matrix: readonly FrameworkPlan[];
  readonly peers: ReadonlyArray<Exclude<Impl, 'bare' | 'idemkit'>>;
  readonly race: boolean;
  readonly latency: boolean;
  /** The floors part (bench/floors.ts): PostgreSQL and SQLite against a raw loop of their statements. */
  readonly floors: boolean;
  /** Print the plan and its estimated duration, and stop. */
  readonly estimate: boolean;
}

type Env = Readonly<Record<string, string | undefined>>;

export function readBenchOptions(args: readonly string[] = process.argv.slice(2), env: Env = process.env): BenchOptions {
  const { values: flags } = parseArgs({
    args: [...args],
    options: {
      quick: { type: 'boolean', default: false },
      'no-delay': { type: 'boolean', default: false },
      'no-race': { type: 'boolean', default: false },
      'no-latency': { type: 'boolean', default: false },
      'no-floors': { type: 'boolean', default: false },
      estimate: { type: 'boolean', default: false },
      framework: { type: 'string' },
      workload: { type: 'string' },
    },
  });

  const number = (name: string, fallback: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!(value > 0)) throw new Error(`${name} must be a positive number, got ${JSON.stringify(raw)}`);
    return value;
  };
  const count = (name: string, fallback: number) => Math.round(number(name, fallback));
  const list = <T extends string>(name: string, all: readonly T[], raw = env[name]): T[] => {
    if (raw === undefined || raw === '' || raw === 'all') return [...all];
    if (raw === 'none') return [];
    const picked = raw.split(',').map((s) => s.trim()) as T[];
    for (const p of picked) if (!all.includes(p)) throw new Error(`${name}: unknown ${JSON.stringify(p)} (expected ${all.join(', ')})`);
    return all.filter((a) => picked.includes(a));
  };

  const quick = flags.quick;
  const given = (raw: string | undefined) => raw !== undefined && raw !== '';
  const workloads = flags.workload ?? env.BENCH_WORKLOADS;
  const withoutDelay = (plans: readonly PlanName[]) => plans.filter((p) => !(flags['no-delay'] && p === 'new-key-5ms'));
  const frameworks = list(flags.framework === undefined ? 'BENCH_FRAMEWORKS' : '--framework', ALL_FRAMEWORKS, flags.framework ?? env.BENCH_FRAMEWORKS);
  const plans = withoutDelay(list(flags.workload === undefined ? 'BENCH_WORKLOADS' : '--workload', ALL_PLANS, workloads));
  const stores = list('BENCH_STORES', ALL_STORES);
  const matrix = frameworks.map((framework): FrameworkPlan => {
    const reduced = REDUCED_MATRIX[framework];
    return {
      framework,
      plans: reduced && !given(workloads) ? withoutDelay(reduced.plans) : plans,
      stores: reduced && !given(env.BENCH_STORES) ? reduced.stores : stores,
    };
  });
  return {
    durationSec: number('BENCH_DURATION', quick ? 1 : 2),
    runs: count('BENCH_RUNS', quick ? 2 : 5),
    warmupSec: number('BENCH_WARMUP', 1),
    latencyRuns: count('BENCH_LATENCY_RUNS', quick ? 1 : 3),
    rawIterations: count('BENCH_RAW_ITERATIONS', quick ? 5_000 : 20_000),
    raceConcurrency: count('BENCH_RACE_CONCURRENCY', 20),
    raceRounds: count('BENCH_RACE_ROUNDS', 10),
    raceDelayMs: number('BENCH_RACE_DELAY', 5),
    noiseLimit: number('BENCH_NOISE_LIMIT', 25),
    quietWaitMs: number('BENCH_QUIET_WAIT', 120) * 1_000,
    frameworks,
    plans,
    stores,
    matrix,
    peers: list('BENCH_PEERS', PEERS),
    race: !flags['no-race'],
    latency: !flags['no-latency'],
    floors: !flags['no-floors'],
    estimate: flags.estimate,
  };
}
