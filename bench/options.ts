/**
 * What `npm run bench` is asked to do: flags (`--quick`, `--estimate`, `--no-race`, …) and the
 * `BENCH_*` environment variables, read and checked once into one plain object that run.ts follows.
 */
import { parseArgs } from 'node:util';
import type { Framework, Impl, StoreKind, Workload } from './shared.js';
import { ALL_STORES, PEERS } from './shared.js';

/** A workload as planned: `new-key-5ms` is the new-key workload with a 5 ms handler. */
export type PlanName = Workload | 'new-key-5ms';
export const ALL_FRAMEWORKS: readonly Framework[] = ['fastify', 'express'];
export const ALL_PLANS: readonly PlanName[] = ['new-key', 'replay', 'contention', 'no-key', 'new-key-5ms'];

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
  readonly plans: readonly PlanName[];
  readonly stores: ReadonlyArray<Exclude<StoreKind, 'none'>>;
  readonly peers: ReadonlyArray<Exclude<Impl, 'bare' | 'idemkit'>>;
  readonly race: boolean;
  readonly latency: boolean;
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
    if (raw === undefined || raw === '') return [...all];
    if (raw === 'none') return [];
    const picked = raw.split(',').map((s) => s.trim()) as T[];
    for (const p of picked) if (!all.includes(p)) throw new Error(`${name}: unknown ${JSON.stringify(p)} (expected ${all.join(', ')})`);
    return all.filter((a) => picked.includes(a));
  };

  const quick = flags.quick;
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
    frameworks: list(flags.framework === undefined ? 'BENCH_FRAMEWORKS' : '--framework', ALL_FRAMEWORKS, flags.framework ?? env.BENCH_FRAMEWORKS),
    plans: list(flags.workload === undefined ? 'BENCH_WORKLOADS' : '--workload', ALL_PLANS, flags.workload ?? env.BENCH_WORKLOADS).filter((p) => !(flags['no-delay'] && p === 'new-key-5ms')),
    stores: list('BENCH_STORES', ALL_STORES),
    peers: list('BENCH_PEERS', PEERS),
    race: !flags['no-race'],
    latency: !flags['no-latency'],
    estimate: flags.estimate,
  };
}
