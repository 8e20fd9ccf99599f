import { describe, expect, it } from 'vitest';
import { readBenchOptions } from '../../bench/options.js';

describe('bench options: flags and BENCH_* variables', () => {
  it('runs everything by default, and shorter runs with --quick', () => {
    const all = readBenchOptions([], {});
    expect(all).toMatchObject({ durationSec: 2, runs: 5, race: true, latency: true, floors: true, estimate: false });
    expect(all.frameworks).toEqual(['fastify', 'express', 'koa', 'nest']);
    expect(all.plans).toEqual(['new-key', 'replay', 'contention', 'no-key', 'new-key-5ms']);
    expect(all.stores).toEqual(['memory', 'sqlite', 'postgres', 'redis', 'redis-node']);
    expect(all.peers).toEqual(['node-idempotency', 'express-idempotency', 'powertools']);
    expect(readBenchOptions(['--quick'], {})).toMatchObject({ durationSec: 1, runs: 2, latencyRuns: 1, rawIterations: 5_000 });
    expect(readBenchOptions(['--quick'], { BENCH_RUNS: '3' }).runs).toBe(3);
  });

  it('narrows to subsets, "none" for no peers, and flags over variables', () => {
    const some = readBenchOptions(['--no-race', '--no-latency', '--no-floors', '--no-delay', '--estimate'], {
      BENCH_FRAMEWORKS: 'express',
      BENCH_STORES: 'redis, memory',
      BENCH_PEERS: 'none',
    });
    expect(some).toMatchObject({ frameworks: ['express'], stores: ['memory', 'redis'], peers: [], race: false, latency: false, floors: false, estimate: true });
    expect(some.plans).not.toContain('new-key-5ms');
    expect(readBenchOptions(['--framework=fastify', '--workload=replay'], { BENCH_FRAMEWORKS: 'express' })).toMatchObject({
      frameworks: ['fastify'],
      plans: ['replay'],
    });
  });

  it('times Koa and Nest on a reduced matrix unless the workloads or the stores are given', () => {
    const reduced = { plans: ['new-key', 'replay', 'contention', 'no-key'], stores: ['memory', 'redis'] };
    const full = { plans: ['new-key', 'replay', 'contention', 'no-key', 'new-key-5ms'], stores: ['memory', 'sqlite', 'postgres', 'redis', 'redis-node'] };
    expect(readBenchOptions([], {}).matrix).toEqual([
      { framework: 'fastify', ...full },
      { framework: 'express', ...full },
      { framework: 'koa', ...reduced },
      { framework: 'nest', ...reduced },
    ]);
    // Each dimension given applies to every framework; the other keeps each framework's default.
    const workloads = readBenchOptions([], { BENCH_FRAMEWORKS: 'express,nest', BENCH_WORKLOADS: 'new-key-5ms,contention' });
    expect(workloads.matrix).toEqual([
      { framework: 'express', plans: ['contention', 'new-key-5ms'], stores: full.stores },
      { framework: 'nest', plans: ['contention', 'new-key-5ms'], stores: reduced.stores },
    ]);
    const stores = readBenchOptions([], { BENCH_FRAMEWORKS: 'koa', BENCH_STORES: 'sqlite' });
    expect(stores.matrix).toEqual([{ framework: 'koa', plans: reduced.plans, stores: ['sqlite'] }]);
    expect(readBenchOptions(['--framework=koa', '--workload=replay'], {}).matrix).toEqual([{ framework: 'koa', plans: ['replay'], stores: reduced.stores }]);
    // `all` is the whole list, given: Koa and Nest on every workload and store.
    expect(readBenchOptions([], { BENCH_FRAMEWORKS: 'koa,nest', BENCH_WORKLOADS: 'all', BENCH_STORES: 'all' }).matrix).toEqual([
      { framework: 'koa', ...full },
      { framework: 'nest', ...full },
    ]);
    // The race check's stores stay the selection, not the reduced matrix.
    expect(readBenchOptions([], { BENCH_FRAMEWORKS: 'koa' }).stores).toEqual(full.stores);
    // --no-delay drops the 5 ms handler from every framework's plans.
    const noDelay = readBenchOptions(['--no-delay'], { BENCH_FRAMEWORKS: 'nest', BENCH_WORKLOADS: 'all' });
    expect(noDelay.matrix[0]!.plans).toEqual(['new-key', 'replay', 'contention', 'no-key']);
  });

  it('refuses unknown names and numbers that are not positive, naming the variable', () => {
    expect(() => readBenchOptions([], { BENCH_STORES: 'mongo' })).toThrow(/BENCH_STORES: unknown "mongo"/);
    expect(() => readBenchOptions([], { BENCH_FRAMEWORKS: 'hapi' })).toThrow(/BENCH_FRAMEWORKS: unknown "hapi" \(expected fastify, express, koa, nest\)/);
    expect(() => readBenchOptions(['--workload=slow'], {})).toThrow(/--workload: unknown "slow"/);
    expect(() => readBenchOptions([], { BENCH_DURATION: '0' })).toThrow(/BENCH_DURATION must be a positive number/);
    expect(() => readBenchOptions(['--fast'], {})).toThrow();
  });
});
