/**
 * `npm run bench:instructions`: instructions per request in the bench server's process, counted by
 * Valgrind's callgrind, so the figure does not move with the machine's load (the throughput bench's
 * ±15-30 points hide any change under ~10 µs). For each framework and workload, in one run: the bare
 * framework, idemkit on each store, node-idempotency on the stores it has, and on Redis the floor
 * (below); with the heap bytes allocated and the scavenges per request.
 *
 *   npm run bench:instructions                                            # everything (~45 min on 2 cores)
 *   npm run bench:instructions -- --frameworks=fastify --stores=memory    # a subset (also BENCH_INSTR_FRAMEWORKS, _STORES, _WORKLOADS, _PEERS, _FLOOR)
 *   npm run bench:instructions -- --stores=redis --floor=none             # without the Redis floor (it runs whenever redis is among the stores)
 *   BENCH_INSTR_NETWORK_RUNS=5 npm run bench:instructions -- --stores=redis   # server processes per Redis/PostgreSQL row (3); BENCH_INSTR_RUNS for the others (1)
 *   npm run bench:instructions -- --guard                                 # CI: Fastify + memory against bench/instructions-baseline.json
 *   npm run bench:instructions -- --guard --update-baseline               # rewrite the baseline (commit it saying why)
 *   npm run bench:instructions -- --keep-profiles=/tmp/cg                 # keep callgrind's dumps, for callgrind_annotate
 *   npm run bench:instructions -- --from=a.json,b.json                    # rewrite RESULTS.md's section from saved runs, measuring nothing
 *
 * Per server process (bench/server.ts, started as the throughput bench starts it, under callgrind;
 * instructions-server.ts): a sanity request on a connection of its own; 8 keep-alive connections
 * opened and kept open to the end (instructions-load.ts says why); 10,000 warm-up requests with
 * instrumentation off, the second half with V8's GC profiler on (instructions-probe.ts: the
 * allocation figures, never counted); then 4,000 counted requests, in windows of WINDOW, each
 * dumped. Everything the process runs in a window is counted: every thread, JIT and GC included.
 *
 * The floor (`--floor=redis`, the default; `--floor=none` leaves it out): on store `redis`, the
 * same server with no idempotency layer, only the round trips any race-correct one makes through
 * ioredis: one `SET … NX GET` per request, answering a replay from its reply, and one `EVALSHA`
 * storing a new key's answer before it goes (bench/server.ts, startFloor). idemkit's Redis store
 * makes the same round trips, so the floor's added instructions are what it cannot go below.
 *
 * Writes the tables into bench/RESULTS.md (between its instructions markers) unless --no-write or
 * --guard, and every run into bench/results/instructions.json (git-ignored).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { freshKey, nonce, replayKeys } from './harness.js';
import type { Load } from './instructions-load.js';
import { openLoad, requestOnce } from './instructions-load.js';
import type { Baseline } from './instructions-report.js';
import { baselineFrom, checkBaseline, mergeResults, renderMarkdown, writeMarkedSection } from './instructions-report.js';
import { startCallgrindServer } from './instructions-server.js';
import type { InstrImpl, InstrResults, InstrRun, InstrStore, InstrWorkload } from './instructions-shared.js';
import { INSTR_FRAMEWORKS, INSTR_STORES, INSTR_WORKLOADS } from './instructions-shared.js';
import { notApplicable } from './peers/applicability.js';
import { NotApplicable } from './peers/types.js';
import { gitHead, packageVersions, srcHash } from './provenance.js';
import type { Framework } from './shared.js';
import { median } from './shared.js';

/** Requests per counted window: each window's count is read on its own (one callgrind dump). */
const WINDOW = 400;
/**
 * A window whose count is more than LUMP × the median window of its run holds work that did not
 * come with its requests: a major GC (its marking and sweeping, every several thousand requests),
 * or a timer, such as the memory store's sweeper (every 60 s, which under callgrind's ~50× slower
 * clock is every few thousand requests instead of every few hundred thousand). Such a window is
 * left out of the per-request figure and counted apart (`lumpWindows`, `allWindowsPerRequest`).
 * A scavenge moves a window by up to ~10 %: under the bound.
 */
const LUMP = 1.15;

const { values: flags } = parseArgs({
  options: {
    frameworks: { type: 'string' },
    stores: { type: 'string' },
    workloads: { type: 'string' },
    peers: { type: 'string' },
    floor: { type: 'string' },
    runs: { type: 'string' },
    'network-runs': { type: 'string' },
    warmup: { type: 'string' },
    requests: { type: 'string' },
    connections: { type: 'string' },
    guard: { type: 'boolean', default: false },
    'update-baseline': { type: 'boolean', default: false },
    baseline: { type: 'string' },
    tolerance: { type: 'string' },
    'keep-profiles': { type: 'string' },
    'no-write': { type: 'boolean', default: false },
    from: { type: 'string' },
  },
});
const env = process.env;

function list<T extends string>(name: string, raw: string | undefined, all: readonly T[]): T[] {
  if (raw === undefined || raw === '' || raw === 'all') return [...all];
  if (raw === 'none') return [];
  const picked = raw.split(',').map((s) => s.trim()) as T[];
  for (const p of picked) if (!all.includes(p)) throw new Error(`${name}: unknown ${JSON.stringify(p)} (expected ${all.join(', ')})`);
  return all.filter((a) => picked.includes(a));
}
function count(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  return value;
}

const guard = flags.guard || flags['update-baseline'];
const frameworks: readonly Framework[] = guard ? ['fastify'] : list('--frameworks', flags.frameworks ?? env.BENCH_INSTR_FRAMEWORKS, INSTR_FRAMEWORKS);
const stores: readonly InstrStore[] = guard ? ['memory'] : list('--stores', flags.stores ?? env.BENCH_INSTR_STORES, INSTR_STORES);
const workloads: readonly InstrWorkload[] = guard ? INSTR_WORKLOADS : list('--workloads', flags.workloads ?? env.BENCH_INSTR_WORKLOADS, INSTR_WORKLOADS);
const withPeer = !guard && list('--peers', flags.peers ?? env.BENCH_INSTR_PEERS, ['node-idempotency'] as const).length > 0;
/** The Redis floor (bench/server.ts, startFloor), where redis is among the stores. */
const withFloor = !guard && stores.includes('redis') && list('--floor', flags.floor ?? env.BENCH_INSTR_FLOOR, ['redis'] as const).length > 0;
/** Server processes per row (each a fresh process: its own JIT and GC history). */
// A baseline is the median of three: one process now and then settles on a slower path for its life (see main).
const runs = count('--runs', flags.runs ?? env.BENCH_INSTR_RUNS, flags['update-baseline'] ? 3 : 1);
/** Rows that wait on Redis or PostgreSQL vary more from run to run (how many answers one wake-up of the event loop finds). */
const networkRuns = count('--network-runs', flags['network-runs'] ?? env.BENCH_INSTR_NETWORK_RUNS, Math.max(runs, guard ? 1 : 3));
const warmupRequests = count('--warmup', flags.warmup ?? env.BENCH_INSTR_WARMUP, 10_000);
/** Counted in windows of WINDOW requests (rounded up to whole windows). */
const countedRequests = Math.ceil(count('--requests', flags.requests ?? env.BENCH_INSTR_REQUESTS, 4_000) / WINDOW) * WINDOW;
const connections = count('--connections', flags.connections ?? env.BENCH_INSTR_CONNECTIONS, 8);
const baselineUrl = flags.baseline ? new URL(flags.baseline, `file://${process.cwd()}/`) : new URL('./instructions-baseline.json', import.meta.url);

const log = (line: string) => process.stderr.write(`${line}\n`);

interface Subject {
  readonly impl: InstrImpl;
  readonly store: InstrStore | 'none';
}

function subjectsFor(framework: Framework): Subject[] {
  const subjects: Subject[] = [{ impl: 'bare', store: 'none' }];
  for (const store of stores) subjects.push({ impl: 'idemkit', store });
  if (withFloor) subjects.push({ impl: 'floor', store: 'redis' });
  if (withPeer) for (const store of stores) if (!notApplicable('node-idempotency', framework, store)) subjects.push({ impl: 'node-idempotency', store });
  return subjects;
}
const runsOf = (s: Subject) => (s.store === 'redis' || s.store === 'redis-node' || s.store === 'postgres' ? networkRuns : runs);
const labelOf = (framework: Framework, workload: InstrWorkload, s: Subject) =>
  `${framework} ${workload} ${s.impl === 'bare' ? 'bare' : `${s.impl}/${s.store}`}`;

async function measure(framework: Framework, workload: InstrWorkload, subject: Subject, outDir: string): Promise<InstrRun | undefined> {
  const label = labelOf(framework, workload, subject);
  const started = Date.now();
  let server;
  try {
    server = await startCallgrindServer(
      { impl: subject.impl, framework, store: subject.store, delayMs: 0, required: true, nonce },
      outDir,
      flags['keep-profiles'] !== undefined,
      log,
    );
  } catch (error) {
    if (error instanceof NotApplicable) {
      log(`  ${label}: n/a (${error.message})`);
      return undefined;
    }
    throw error;
  }
  let load: Load | undefined;
  try {
    const idempotent = subject.impl !== 'bare';
    // Sanity, as the throughput bench checks before timing: a key answers once, then replays.
    if (workload === 'new-key') {
      const key = freshKey();
      const first = await requestOnce(server.url, key);
      const again = await requestOnce(server.url, key);
      if (first.status !== 201 || again.status !== 201 || (first.id === again.id) !== idempotent) {
        throw new Error(`${label}: sanity check failed (${first.status} ${first.id}, then ${again.status} ${again.id})`);
      }
    } else {
      // Complete the replay keys one by one, so that every request of the warm-up is a replay.
      for (const key of replayKeys) {
        const first = await requestOnce(server.url, key);
        if (first.status !== 201) throw new Error(`${label}: completing ${key} answered ${first.status}`);
      }
    }
    load = await openLoad(server.url, workload, connections);
    // The warm-up's second half measures allocation, before counting: the GC profiler's own work is never counted.
    const gcRequests = Math.floor(warmupRequests / 2);
    await load.run(warmupRequests - gcRequests);
    await server.gcStart();
    await load.run(gcRequests);
    const gc = await server.gcStop();

    const before = await server.stats();
    await server.startCounting();
    const windows: number[] = [];
    const mainThread: number[] = [];
    for (let sent = 0; sent < countedRequests; sent += WINDOW) {
      await load.run(WINDOW);
      const counted = await server.dump();
      windows.push(counted.total / WINDOW);
      mainThread.push(counted.mainThread / WINDOW);
    }
    await server.stopCounting();
    const after = await server.stats();
    const handled = after.handled - before.handled;
    const expected = idempotent && workload === 'replay' ? 0 : windows.length * WINDOW;
    if (handled !== expected) throw new Error(`${label}: the handler ran ${handled} times in the counted windows (expected ${expected})`);

    const typical = median(windows);
    const kept = windows.map((w, i) => ({ w, m: mainThread[i]! })).filter(({ w }) => w <= LUMP * typical);
    const mean = (values: readonly number[]) => values.reduce((a, b) => a + b, 0) / values.length;
    const run: InstrRun = {
      framework,
      workload,
      impl: subject.impl,
      store: subject.store,
      instructionsPerRequest: mean(kept.map(({ w }) => w)),
      mainThreadPerRequest: mean(kept.map(({ m }) => m)),
      allWindowsPerRequest: mean(windows),
      windows: windows.map(Math.round),
      lumpWindows: windows.length - kept.length,
      allocatedBytesPerRequest: gc.allocatedBytes / gcRequests,
      scavengesPer1000: (1000 * gc.allocatedBytes) / gcRequests / gc.bytesPerScavenge,
      scavengesCounted: gc.scavenges,
      markCompactsCounted: gc.markCompacts,
      gcRequests,
      reconnects: load.reconnects,
      seconds: Math.round((Date.now() - started) / 1000),
    };
    log(
      `  ${label}: ${(run.instructionsPerRequest / 1000).toFixed(1)}k instructions/request ` +
        `(main thread ${(run.mainThreadPerRequest / 1000).toFixed(1)}k; windows ${windows.map((w) => (w / 1000).toFixed(0)).join(' ')}k` +
        `${run.lumpWindows > 0 ? `, ${run.lumpWindows} left out` : ''}), ` +
        `${(run.allocatedBytesPerRequest / 1024).toFixed(1)} KB allocated/request, ${run.scavengesPer1000.toFixed(1)} scavenges/1000 (${run.seconds} s)`,
    );
    if (run.reconnects > 0) log(`  (${run.reconnects} connections were closed by the server between windows and reopened)`);
    return run;
  } finally {
    load?.close();
    await server.stop();
  }
}

function version(command: string, args: string[]): string {
  try {
    return execFileSync(command, args, { encoding: 'utf8' }).trim();
  } catch {
    return 'not found';
  }
}

/** `--from=a.json,b.json`: the section rewritten from saved runs (bench/results/instructions*.json), nothing measured. */
function renderFrom(files: string): number {
  const parts = files.split(',').map((file) => JSON.parse(readFileSync(file.trim(), 'utf8')) as InstrResults);
  const markdown = renderMarkdown(mergeResults(parts));
  process.stdout.write(`${markdown}\n`);
  if (!flags['no-write']) {
    writeMarkedSection(new URL('./RESULTS.md', import.meta.url), markdown);
    log('written: bench/RESULTS.md (its instructions section)');
  }
  return 0;
}

async function main(): Promise<number> {
  if (flags.from !== undefined) return renderFrom(flags.from);
  const valgrind = version('valgrind', ['--version']);
  if (valgrind === 'not found') {
    log('valgrind is not installed (Debian: apt-get install valgrind)');
    return 2;
  }
  const plan = frameworks.flatMap((framework) => subjectsFor(framework).map((s) => workloads.length * runsOf(s)));
  log(
    `instructions per request under callgrind: ${frameworks.join(', ')} × ${workloads.join(', ')} × bare, idemkit on ${stores.join(', ')}` +
      `${withFloor ? ', the ioredis floor' : ''}${withPeer ? ', node-idempotency where it has the store' : ''}; ${plan.reduce((a, b) => a + b, 0)} server processes ` +
      `(${runs} per row, ${networkRuns} for Redis and PostgreSQL); ${connections} connections, ${warmupRequests} warm-up requests, ${countedRequests} counted`,
  );
  const outDir = flags['keep-profiles'] ?? mkdtempSync(join(tmpdir(), 'idemkit-callgrind-'));
  mkdirSync(outDir, { recursive: true });
  const measured: InstrRun[] = [];
  const failures: string[] = [];
  const started = Date.now();
  /** Each subject of a framework and workload, `rounds(subject)` times, round by round (a row's runs spread over the group's time). */
  const measureGroup = async (framework: Framework, workload: InstrWorkload, rounds: (s: Subject) => number) => {
    const subjects = subjectsFor(framework);
    const most = Math.max(...subjects.map(rounds));
    for (let round = 0; round < most; round++) {
      for (const subject of subjects) {
        if (round >= rounds(subject)) continue;
        let run: InstrRun | undefined;
        try {
          run = await measure(framework, workload, subject, outDir);
        } catch (error) {
          // The guard fails on it; a table goes on with the other rows, says which failed, and exits 1 at the end.
          if (guard) throw error;
          const label = labelOf(framework, workload, subject);
          failures.push(`${label}: ${error instanceof Error ? error.message : String(error)}`);
          log(`  ${label}: FAILED (${failures.at(-1)!.slice(label.length + 2)}); going on with the other rows`);
        }
        if (run) measured.push(run);
      }
    }
  };
  const resultsNow = (): InstrResults => ({
    date: new Date().toISOString(),
    commit: gitHead(),
    srcHash: srcHash(),
    node: process.version,
    valgrind,
    cpu: `${cpus().length} × ${cpus()[0]?.model.trim() ?? 'unknown CPU'}`,
    command: `npm run bench:instructions${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
    connections,
    warmupRequests,
    countedRequests,
    runs: [...measured],
    versions: packageVersions(),
  });
  let verdict: ReturnType<typeof checkBaseline> | undefined;
  try {
    for (const framework of frameworks) for (const workload of workloads) await measureGroup(framework, workload, runsOf);
    const baseline = guard && !flags['update-baseline'] ? readBaseline() : undefined;
    if (baseline) {
      verdict = checkBaseline(resultsNow(), baseline);
      if (verdict.failed.length > 0) {
        // Now and then a server process settles for its whole life on a slower path (~13 % more on a
        // new key: an inline cache of V8's that keeps missing; docs/performance.md). A failure is
        // confirmed on two more processes per side, and the medians of three decide.
        for (const line of verdict.lines) log(line);
        log(`confirming on two more server processes per side: ${verdict.failed.join(', ')}`);
        for (const workload of verdict.failed) await measureGroup('fastify', workload, () => 2);
        verdict = checkBaseline(resultsNow(), baseline);
      }
    }
  } finally {
    if (flags['keep-profiles'] === undefined) rmSync(outDir, { recursive: true, force: true });
    else log(`callgrind dumps kept in ${outDir} (callgrind.<pid>.1-01 is a counted window's main thread)`);
  }
  log(`took ${((Date.now() - started) / 60_000).toFixed(1)} min`);

  const results = resultsNow();
  mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
  writeFileSync(new URL(`./results/instructions${guard ? '-guard' : ''}.json`, import.meta.url), `${JSON.stringify(results, null, 2)}\n`);
  const markdown = renderMarkdown(results);
  process.stdout.write(`${markdown}\n`);

  if (flags['update-baseline']) {
    const previous = readBaseline();
    const tolerance = flags.tolerance !== undefined ? Number(flags.tolerance) : (previous?.tolerance ?? 0.05);
    const baseline: Baseline = baselineFrom(results, tolerance);
    writeFileSync(baselineUrl, `${JSON.stringify(baseline, null, 2)}\n`);
    log(`written: ${baselineUrl.pathname} (commit it with a message that says why the baseline moved)`);
    return 0;
  }
  if (guard) {
    if (!verdict) {
      log(`no baseline at ${baselineUrl.pathname}: run with --update-baseline first`);
      return 2;
    }
    for (const line of verdict.lines) log(line);
    return verdict.ok ? 0 : 1;
  }
  if (!flags['no-write']) {
    writeMarkedSection(new URL('./RESULTS.md', import.meta.url), markdown);
    log('written: bench/RESULTS.md (its instructions section), bench/results/instructions.json');
  }
  for (const failure of failures) log(`FAILED: ${failure}`);
  return failures.length === 0 ? 0 : 1;
}

function readBaseline(): Baseline | undefined {
  try {
    return JSON.parse(readFileSync(baselineUrl, 'utf8')) as Baseline;
  } catch {
    return undefined;
  }
}

process.exitCode = await main();
