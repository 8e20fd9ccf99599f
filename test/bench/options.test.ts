import { describe, expect, it } from 'vitest';
import { readBenchOptions } from '../../bench/options.js';

describe('bench options: flags and BENCH_* variables', () => {
  it('runs everything by default, and shorter runs with --quick', () => {
    const all = readBenchOptions([], {});
    expect(all).toMatchObject({ durationSec: 2, runs: 5, race: true, latency: true, estimate: false });
    expect(all.frameworks).toEqual(['fastify', 'express']);
    expect(all.plans).toEqual(['new-key', 'replay', 'contention', 'no-key', 'new-key-5ms']);
    expect(all.stores).toEqual(['memory', 'sqlite', 'postgres', 'redis']);
    expect(all.peers).toEqual(['node-idempotency', 'express-idempotency', 'powertools']);
    expect(readBenchOptions(['--quick'], {})).toMatchObject({ durationSec: 1, runs: 2, latencyRuns: 1, rawIterations: 5_000 });
    expect(readBenchOptions(['--quick'], { BENCH_RUNS: '3' }).runs).toBe(3);
  });

  it('narrows to subsets, "none" for no peers, and flags over variables', () => {
    const some = readBenchOptions(['--no-race', '--no-latency', '--no-delay', '--estimate'], {
      BENCH_FRAMEWORKS: 'express',
      BENCH_STORES: 'redis, memory',
      BENCH_PEERS: 'none',
    });
    expect(some).toMatchObject({ frameworks: ['express'], stores: ['memory', 'redis'], peers: [], race: false, latency: false, estimate: true });
    expect(some.plans).not.toContain('new-key-5ms');
    expect(readBenchOptions(['--framework=fastify', '--workload=replay'], { BENCH_FRAMEWORKS: 'express' })).toMatchObject({
      frameworks: ['fastify'],
      plans: ['replay'],
    });
  });

  it('refuses unknown names and numbers that are not positive, naming the variable', () => {
    expect(() => readBenchOptions([], { BENCH_STORES: 'mongo' })).toThrow(/BENCH_STORES: unknown "mongo"/);
    expect(() => readBenchOptions(['--workload=slow'], {})).toThrow(/--workload: unknown "slow"/);
    expect(() => readBenchOptions([], { BENCH_DURATION: '0' })).toThrow(/BENCH_DURATION must be a positive number/);
    expect(() => readBenchOptions(['--fast'], {})).toThrow();
  });
});
