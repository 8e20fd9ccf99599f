/**
 * `npm run bench`: idemkit side by side with the npm peers, in one run.
 *
 *   1. raw store time, in-process;
 *   2. the race check: each implementation through `idemkit check`'s race case (20 concurrent
 *      same-key requests × 10 rounds), counting double executions and hangs, on every framework
 *      and selected store;
 *   3. throughput: for each framework and workload, the bare framework, idemkit on each store and
 *      each peer on each store it supports, one server process per configuration, autocannon in
 *      this process; warm-up, then N runs, medians (Koa and Nest: a reduced matrix by default,
 *      REDUCED_MATRIX in options.ts);
 *   4. latency at a fixed rate of half the bare framework's maximum, on Redis;
 *   5. the floors (floors.ts): PostgreSQL and SQLite against a raw loop of the statements the
 *      store sends, in their own section of RESULTS.md (`npm run bench:floors` runs it alone).
 *
 * Writes bench/RESULTS.md (markdown.ts; the sections other parts wrote into it, such as
 * `npm run bench:instructions`'s, are kept), bench/results-chart.svg (chart.ts), and
 * bench/results/latest.json (every run; bench/render.ts rewrites the report from it).
 * Never fails on a missed target; exits 1 when a bare or idemkit configuration measured something
 * other than its workload (non-2xx answers, handler counts that do not match).
 *
 * What to run (subsets, run lengths, --quick, --estimate, …) is read in options.ts.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { raceCase } from 'idemkit/check';
import type { LoadSample, ServerHandle } from './harness.js';
import { CONNECTIONS, connectionsFor, freshKey, nonce, post, replayKeys, runLoad, startServer, waitForQuiet } from './harness.js';
import type { PacedSample } from './paced.js';
import { runPaced } from './paced.js';
import type { FloorResults } from './floors-report.js';
import { floorsSection, keepSections, replaceSection } from './floors-report.js';
import { measureFloors } from './floors.js';
import { PEER_STORES, notApplicable } from './peers/applicability.js';
import { NotApplicable } from './peers/types.js';
import type { RawResults } from './raw-store.js';
import { measureRawStores } from './raw-store.js';
import { writeChart } from './chart.js';
import { writeResultsMarkdown } from './markdown.js';
import type { FrameworkPlan, PlanName, ServerStore } from './options.js';
import { readBenchOptions } from './options.js';
import { gitHead, packageVersions, readLoadAverage, srcHash } from './provenance.js';
import type { BenchResults, ConfigResult, LatencyResult, RaceEntry, Subject } from './results.js';
import { buildRows } from './results.js';
import type { Framework, ServerConfig, StoreKind, Workload } from './shared.js';
import { ALL_STORES, BODY, CONTENT_TYPE, ROUTE, median } from './shared.js';

const options = readBenchOptions();
const { durationSec, runs, warmupSec, latencyRuns, rawIterations, raceConcurrency, raceRounds, raceDelayMs, noiseLimit, quietWaitMs } = options;
/** The selected stores: the race check covers each on every framework; timing, each framework's own (MATRIX). */
const SERVER_STORES = options.stores;
const { frameworks: FRAMEWORKS, matrix: MATRIX, peers: SELECTED_PEERS } = options;
const MAX_RETRIES_PER_RUN = 4;
const DELAY_MS = 5;

/** The workloads and stores `framework` is timed on (options.ts, REDUCED_MATRIX). */
function planOf(framework: Framework): FrameworkPlan {
  return MATRIX.find((m) => m.framework === framework)!;
}
/** Every store some framework is timed on, in the usual order: the raw store time measures these. */
const TIMED_STORES = ALL_STORES.filter((s) => MATRIX.some((m) => m.stores.includes(s)));

/**
 * Every implementation × store measured for one framework and workload: on the framework's timed
 * stores, or on `stores` (the race check runs every selected store on every framework).
 */
function subjectsFor(framework: Framework, plan: PlanName, serverStores: readonly ServerStore[] = planOf(framework).stores): Subject[] {
  const subjects: Subject[] = [{ impl: 'bare', store: 'none' }];
  // Without a key no store is touched: one store per implementation is enough.
  const stores: readonly StoreKind[] =
    plan === 'no-key' ? [serverStores.includes('redis') ? 'redis' : (serverStores[0] ?? 'memory')] : serverStores;
  for (const store of stores) subjects.push({ impl: 'idemkit', store });
  for (const peer of SELECTED_PEERS) {
    const peerStores = plan === 'no-key' ? [PEER_STORES[peer].includes('redis') ? 'redis' : PEER_STORES[peer][0]!] : stores;
    for (const store of peerStores) if (!notApplicable(peer, framework, store)) subjects.push({ impl: peer, store });
  }
  return subjects;
}

const latencySubjects = (framework: Framework): Subject[] =>
  planOf(framework).stores.includes('redis')
    ? [
        { impl: 'bare', store: 'none' },
        { impl: 'idemkit', store: 'redis' },
        ...SELECTED_PEERS.filter((p) => !notApplicable(p, framework, 'redis')).map((impl): Subject => ({ impl, store: 'redis' })),
      ]
    : [];

const log = (line: string) => process.stderr.write(`${line}\n`);
const labelOf = (s: Subject) => (s.impl === 'bare' ? 'bare' : `${s.impl}/${s.store}`);

/** Proves the server answers as the workload expects before anything is timed; warms the replay keys. */
async function precheck(server: ServerHandle, subject: Subject, workload: Workload): Promise<void> {
  const idempotent = subject.impl !== 'bare';
  const expect = (what: string, ok: boolean) => {
    if (!ok) throw new Error(`precheck failed (${labelOf(subject)}, ${workload}): ${what}`);
  };
  if (workload === 'no-key') {
    const r = await post(server.url, undefined);
    return expect(`expected 201 without a key, got ${r.status}`, r.status === 201);
  }
  // A replay is recognised by its body: the handler returns a new id each time it runs.
  if (workload === 'new-key' || workload === 'contention') {
    const key = freshKey();
    const first = await post(server.url, key);
    expect(`expected 201 for a new key, got ${first.status}`, first.status === 201);
    const again = await post(server.url, key);
    return expect(`expected the same key to ${idempotent ? '' : 'not '}replay`, again.status === 201 && (again.id === first.id) === idempotent);
  }
  const firsts = new Map<string, string | undefined>();
  for (const key of replayKeys) {
    const first = await post(server.url, key);
    if (first.status === 201) firsts.set(key, first.id);
  }
  for (const key of replayKeys) {
    const again = await post(server.url, key);
    expect(`expected 201 when replaying, got ${again.status}`, again.status === 201);
    if (idempotent) expect('expected a warmed key to replay the same body', !firsts.has(key) || again.id === firsts.get(key));
  }
}

function sum(samples: readonly LoadSample[], pick: (s: LoadSample) => number): number {
  return samples.reduce((n, s) => n + pick(s), 0);
}

function problemsOf(samples: readonly LoadSample[], subject: Subject, workload: Workload): string[] {
  const problems: string[] = [];
  const statuses = mergeStatuses(samples);
  const allowed = workload === 'contention' ? new Set(['201', '409']) : new Set(['201']);
  const unexpected = Object.entries(statuses).filter(([code]) => !allowed.has(code));
  if (unexpected.length > 0) problems.push(`unexpected answers: ${unexpected.map(([code, n]) => `${n} × ${code}`).join(', ')}`);
  const errors = sum(samples, (s) => s.errors);
  if (errors > 0) problems.push(`${errors} socket errors`);
  const handled = sum(samples, (s) => s.handled);
  const completed = sum(samples, (s) => s.completed);
  if (subject.impl !== 'bare' && workload === 'replay') {
    if (handled > 0) problems.push(`the handler ran ${handled} times in a replay workload`);
  } else if (workload !== 'contention' && Math.abs(handled - completed) > 2 * connectionsFor(workload) * samples.length) {
    problems.push(`the handler ran ${handled} times for ${completed} answers`);
  }
  return problems;
}

function mergeStatuses(samples: readonly LoadSample[]): Record<string, number> {
  const statuses: Record<string, number> = {};
  for (const s of samples) for (const [code, n] of Object.entries(s.statuses)) statuses[code] = (statuses[code] ?? 0) + n;
  return statuses;
}

function serverConfig(framework: Framework, subject: Subject, workload: Workload, delayMs: number): ServerConfig {
  return { impl: subject.impl, framework, store: subject.store, delayMs, required: workload !== 'no-key', nonce };
}

/** One configuration's server, checked and warmed up, ready for runs. */
interface Measured {
  readonly server: ServerHandle;
  readonly framework: Framework;
  readonly subject: Subject;
  readonly workload: Workload;
  readonly delayMs: number;
  readonly label: string;
  readonly samples: LoadSample[];
  discardedRuns: number;
}

async function open(framework: Framework, plan: PlanName, subject: Subject): Promise<Measured | { notApplicable: string }> {
  const workload: Workload = plan === 'new-key-5ms' ? 'new-key' : plan;
  const delayMs = plan === 'new-key-5ms' ? DELAY_MS : 0;
  const label = `${framework} ${workload}${delayMs ? ` (${delayMs} ms handler)` : ''} ${labelOf(subject)}`;
  let server: ServerHandle;
  try {
    server = await startServer(serverConfig(framework, subject, workload, delayMs));
  } catch (error) {
    if (error instanceof NotApplicable) return { notApplicable: error.message };
    throw error;
  }
  try {
    await precheck(server, subject, workload);
    await waitForQuiet(noiseLimit, quietWaitMs, log);
    await runLoad(server, workload, warmupSec);
  } catch (error) {
    await server.stop();
    throw error;
  }
  return { server, framework, subject, workload, delayMs, label, samples: [], discardedRuns: 0 };
}

/** `count` more runs, each redone (up to MAX_RETRIES_PER_RUN times) when other processes were busy during it. */
async function sample(m: Measured, count: number): Promise<LoadSample[]> {
  const taken: LoadSample[] = [];
  for (let retries = 0; taken.length < count; ) {
    const s = await runLoad(m.server, m.workload, durationSec);
    const noisy = (s.otherCpuPercent ?? 0) > noiseLimit;
    log(
      `  ${m.label}: run ${m.samples.length + taken.length + 1}: ${Math.round(s.reqPerSec)} req/s, p99 ${s.p99Ms} ms, ` +
        `server ${s.serverCpuMicrosPerReq.toFixed(1)} µs/req at ${s.serverCpuPercent.toFixed(0)} % CPU` +
        (s.otherCpuPercent === undefined ? '' : `, other ${s.otherCpuPercent.toFixed(0)} %`) +
        (s.storeCpuPercent ? `, store ${s.storeCpuPercent.toFixed(0)} %` : '') +
        (s.duplicates > 0 && m.subject.impl !== 'bare' ? `, ${s.duplicates} DOUBLE EXECUTIONS` : '') +
        (noisy && retries < MAX_RETRIES_PER_RUN ? ' — noisy, discarded' : ''),
    );
    if (noisy && retries < MAX_RETRIES_PER_RUN) {
      retries++;
      m.discardedRuns++;
      await waitForQuiet(noiseLimit, quietWaitMs, log);
      continue;
    }
    taken.push(s);
    retries = 0;
  }
  m.samples.push(...taken);
  return taken;
}

/**
 * For idemkit on an in-process store: one more run with the server timing its store calls, in µs
 * per request. The raw store time is measured in a loop of its own; this is the same work done by
 * the server between its other work, which is what the added time contains.
 */
async function storeTimeInServer(m: Measured): Promise<number | undefined> {
  const { impl, store } = m.subject;
  if (impl !== 'idemkit' || (store !== 'memory' && store !== 'sqlite') || m.delayMs > 0) return undefined;
  if (m.workload !== 'new-key' && m.workload !== 'replay') return undefined;
  await m.server.timeStore(true);
  try {
    const before = (await m.server.stats()).storeMicros;
    const s = await runLoad(m.server, m.workload, durationSec);
    const after = (await m.server.stats()).storeMicros;
    return s.completed > 0 ? (after - before) / s.completed : undefined;
  } finally {
    await m.server.timeStore(false);
  }
}

function summarize(m: Measured): ConfigResult {
  const { samples, subject, workload } = m;
  const rps = samples.map((s) => s.reqPerSec);
  const reqPerSec = median(rps);
  const others = samples.map((s) => s.otherCpuPercent).filter((v): v is number => v !== undefined);
  return {
    impl: subject.impl,
    framework: m.framework,
    store: subject.store,
    workload,
    delayMs: m.delayMs,
    runs: samples,
    reqPerSec,
    p50Ms: median(samples.map((s) => s.p50Ms)),
    p99Ms: median(samples.map((s) => s.p99Ms)),
    serverCpuMicrosPerReq: median(samples.map((s) => s.serverCpuMicrosPerReq)),
    serverSysMicrosPerReq: median(samples.map((s) => s.serverSysMicrosPerReq)),
    serverCpuPercent: median(samples.map((s) => s.serverCpuPercent)),
    otherCpuPercent: others.length > 0 ? median(others) : undefined,
    spreadPercent: (100 * (Math.max(...rps) - Math.min(...rps))) / reqPerSec,
    discardedRuns: m.discardedRuns,
    problems: problemsOf(samples, subject, workload),
    statuses: mergeStatuses(samples),
    duplicates: subject.impl === 'bare' ? 0 : sum(samples, (s) => s.duplicates),
  };
}

type Skipped = { framework: Framework; plan: PlanName; subject: Subject; reason: string };

/**
 * One framework × workload: the bare server stays up, and one bare run goes before the first
 * configuration and after each one, so every configuration is compared with the bare runs taken
 * next to it (its `baseline`). The bare configuration itself is the median of all its runs.
 */
async function measureGroup(framework: Framework, plan: PlanName, sink: { configs: ConfigResult[]; skipped: Skipped[] }): Promise<void> {
  const [bareSubject, ...subjects] = subjectsFor(framework, plan);
  const bare = await open(framework, plan, bareSubject!);
  if ('notApplicable' in bare) throw new Error(`bare ${framework} cannot serve ${plan}: ${bare.notApplicable}`);
  try {
    let before = (await sample(bare, 1))[0]!;
    for (const subject of subjects) {
      const m = await open(framework, plan, subject);
      if ('notApplicable' in m) {
        sink.skipped.push({ framework, plan, subject, reason: m.notApplicable });
        continue;
      }
      let storeMicrosInServer: number | undefined;
      try {
        await sample(m, runs);
        storeMicrosInServer = await storeTimeInServer(m);
      } finally {
        await m.server.stop();
      }
      const after = (await sample(bare, 1))[0]!;
      const mean = (pick: (s: LoadSample) => number) => (pick(before) + pick(after)) / 2;
      sink.configs.push({
        ...summarize(m),
        storeMicrosInServer,
        baseline: {
          reqPerSec: mean((s) => s.reqPerSec),
          p99Ms: mean((s) => s.p99Ms),
          serverCpuMicrosPerReq: mean((s) => s.serverCpuMicrosPerReq),
          serverSysMicrosPerReq: mean((s) => s.serverSysMicrosPerReq),
        },
      });
      before = after;
    }
    // A group with few configurations still gets as many bare runs as any configuration.
    if (bare.samples.length < runs) await sample(bare, runs - bare.samples.length);
    sink.configs.push(summarize(bare));
  } finally {
    await bare.server.stop();
  }
}

/** The race case against one implementation, plus the server's own execution count as a cross-check. */
async function race(framework: Framework, subject: Subject, variant = ''): Promise<RaceEntry> {
  const name = variant ? `${subject.impl} (${variant})` : subject.impl;
  const base = { framework, impl: subject.impl, name, store: subject.store };
  let server: ServerHandle;
  try {
    server = await startServer(serverConfig(framework, subject, 'new-key', raceDelayMs), variant);
  } catch (error) {
    if (error instanceof NotApplicable) return { ...base, notApplicable: error.message };
    throw error;
  }
  try {
    const before = await server.stats();
    const result = await raceCase(
      { url: server.url + ROUTE, body: BODY, headers: { 'content-type': CONTENT_TYPE }, timeoutMs: 10_000 },
      { concurrency: raceConcurrency, rounds: raceRounds },
    );
    const after = await server.stats();
    // One execution per round is right; each round's later replay request must not execute either.
    const serverDoubles = Math.max(0, after.handled - before.handled - result.rounds);
    const entry: RaceEntry = {
      ...base,
      doubleExecutions: result.doubleExecutions,
      serverDoubleExecutions: serverDoubles,
      hangs: result.hangs,
      errors: result.errors,
      statuses: result.statuses,
      laterReplayMismatches: result.perRound.filter((r) => r.laterReplayMatches === false).length,
      ms: result.ms,
    };
    log(
      `  race ${framework} ${name}/${subject.store}: ${entry.serverDoubleExecutions} double executions ` +
        `(${entry.doubleExecutions} seen by clients), ${entry.hangs} hangs, statuses ${JSON.stringify(entry.statuses)}`,
    );
    return entry;
  } finally {
    await server.stop();
  }
}

async function latency(framework: Framework, workload: 'new-key' | 'replay', subject: Subject, rate: number): Promise<LatencyResult | undefined> {
  let server: ServerHandle;
  try {
    server = await startServer(serverConfig(framework, subject, workload, 0));
  } catch (error) {
    if (error instanceof NotApplicable) return undefined;
    throw error;
  }
  try {
    await precheck(server, subject, workload);
    await waitForQuiet(noiseLimit, quietWaitMs, log);
    // Warm the JIT at full speed first: a paced second alone leaves the first measured run slower.
    await runLoad(server, workload, warmupSec);
    await runPaced(server, workload, rate, warmupSec);
    const samples: PacedSample[] = [];
    for (let i = 0; i < latencyRuns; i++) {
      const s = await runPaced(server, workload, rate, durationSec);
      log(
        `  latency ${framework} ${workload} ${labelOf(subject)} at ${Math.round(rate)} req/s: ` +
          `p50 ${(s.p50Micros / 1e3).toFixed(2)} ms, p99 ${(s.p99Micros / 1e3).toFixed(2)} ms (achieved ${Math.round(s.achievedRate)} req/s)`,
      );
      samples.push(s);
    }
    return {
      framework,
      workload,
      impl: subject.impl,
      store: subject.store,
      rate,
      p50Micros: median(samples.map((s) => s.p50Micros)),
      p99Micros: median(samples.map((s) => s.p99Micros)),
      achievedRate: median(samples.map((s) => s.achievedRate)),
      errors: samples.reduce((n, s) => n + s.errors + s.non2xx, 0),
    };
  } finally {
    await server.stop();
  }
}

/** The race check's servers of one framework: every selected store, whatever the framework's timed matrix. */
const raceSubjects = (framework: Framework): Subject[] => subjectsFor(framework, 'new-key', SERVER_STORES).filter((s) => s.impl !== 'bare');
/** The race check's two more Powertools variants run on the first framework Powertools applies to. */
const POWERTOOLS_VARIANTS_ON = FRAMEWORKS.find((f) => raceSubjects(f).some((s) => s.impl === 'powertools'));

/** A Nest application takes about a second longer to start than the others (module scan, DI, router). */
const EXTRA_STARTUP_SEC: Partial<Record<Framework, number>> = { nest: 1 };

/** Seconds for the whole run, from the plan, for the estimate printed at the start. */
function estimateSeconds(): number {
  let total = 20;
  for (const framework of FRAMEWORKS) {
    const extra = EXTRA_STARTUP_SEC[framework] ?? 0;
    const startup = 2.7 + extra; // server start (tsx), precheck, the quiet check (2 × 0.5 s)
    const raceServer = 3 + extra; // server start and the 10 rounds
    const perConfig = startup + warmupSec + runs * durationSec;
    for (const plan of planOf(framework).plans) {
      const subjects = subjectsFor(framework, plan).length; // bare + the others
      // …and one bare run next to each configuration (measureGroup), beyond `runs`.
      total += subjects * perConfig + Math.max(0, subjects - runs) * durationSec;
    }
    if (options.race) total += (raceSubjects(framework).length + (framework === POWERTOOLS_VARIANTS_ON ? 2 : 0)) * raceServer;
    if (options.latency) total += 2 * latencySubjects(framework).length * (startup + 2 * warmupSec + latencyRuns * durationSec);
  }
  if (options.floors) {
    // Two workloads each: PostgreSQL's two sides (warm-up, then each repetition after a quiet check);
    // SQLite's in-process loops (a few seconds) and a server timed under load.
    if (SERVER_STORES.includes('postgres')) total += 2 * (2 * warmupSec + runs * (2 * durationSec + 1));
    if (SERVER_STORES.includes('sqlite')) total += 10 + 3 + 2 * (warmupSec + runs * (durationSec + 1));
  }
  return total;
}

async function main(): Promise<void> {
  const codeAtStart = { head: gitHead(), src: srcHash() };
  const started = Date.now();
  const loadAtStart = readLoadAverage();
  const estimate = estimateSeconds();
  log(
    `idemkit bench: ${MATRIX.map((m) => `${m.framework} (${m.plans.join(', ') || 'no workload'}; ${m.stores.join(', ') || 'no store'})`).join('; ')}; ` +
      `race check on ${SERVER_STORES.join(', ') || 'no store'}; ` +
      `peers ${SELECTED_PEERS.join(', ') || 'none'}; warm-up ${warmupSec} s + ${runs} × ${durationSec} s per configuration. ` +
      `Estimated duration: ~${Math.ceil(estimate / 60)} min.`,
  );

  if (options.estimate) return;

  log(`raw store time: ${rawIterations} iterations × ${runs} repetitions…`);
  const raw: RawResults = await measureRawStores(TIMED_STORES, rawIterations, runs);
  for (const s of raw.stores) log(`  ${s.store}: new key ${s.newKeyMicros.toFixed(2)} µs, replay ${s.replayMicros.toFixed(2)} µs`);

  const races: RaceEntry[] = [];
  if (options.race) {
    log(`race check: ${raceConcurrency} concurrent same-key requests × ${raceRounds} rounds, ${raceDelayMs} ms handler…`);
    for (const framework of FRAMEWORKS) {
      for (const subject of raceSubjects(framework)) {
        races.push(await race(framework, subject));
        // The same peer wired differently: without a Lambda context (outside Lambda), and with payload validation.
        if (subject.impl === 'powertools' && framework === POWERTOOLS_VARIANTS_ON) {
          races.push(await race(framework, subject, 'no-context'));
          races.push(await race(framework, subject, 'validation'));
        }
      }
    }
  }

  const configs: ConfigResult[] = [];
  const skipped: Skipped[] = [];
  for (const { framework, plans } of MATRIX) {
    for (const plan of plans) await measureGroup(framework, plan, { configs, skipped });
  }

  const latencies: LatencyResult[] = [];
  if (options.latency) {
    for (const framework of FRAMEWORKS) {
      for (const workload of ['new-key', 'replay'] as const) {
        const bareMax = configs.find((c) => c.impl === 'bare' && c.framework === framework && c.workload === workload && c.delayMs === 0);
        if (!bareMax) continue;
        const rate = Math.round(bareMax.reqPerSec / 2);
        for (const subject of latencySubjects(framework)) {
          const result = await latency(framework, workload, subject, rate);
          if (result) latencies.push(result);
        }
      }
    }
  }

  let floors: FloorResults | undefined;
  if (options.floors) {
    floors = await measureFloors({
      stores: SERVER_STORES,
      repetitions: runs,
      durationSec,
      warmupSec,
      iterations: rawIterations,
      noiseLimit,
      quietWaitMs,
      command: 'npm run bench (its floors part)',
      log,
    });
  }

  const ours = configs.filter((c) => c.impl === 'bare' || c.impl === 'idemkit');
  const rows = buildRows(ours, raw);
  const results: BenchResults = {
    meta: {
      date: new Date().toISOString(),
      node: process.version,
      cpus: `${cpus().length} × ${cpus()[0]?.model.trim() ?? 'unknown CPU'}`,
      commit:
        `${codeAtStart.head}, src sha256 ${codeAtStart.src}` +
        (srcHash() === codeAtStart.src ? '' : ` (src/ changed during the run, to ${srcHash()}: numbers mix two versions)`),
      durationSec,
      runs,
      warmupSec,
      connections: CONNECTIONS,
      memory: `${(totalmem() / 2 ** 30).toFixed(1)} GiB`,
      command: `${Object.entries(process.env)
        .filter(([k]) => k.startsWith('BENCH_'))
        .map(([k, v]) => `${k}=${v} `)
        .join('')}npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
      elapsedSec: Math.round((Date.now() - started) / 1000),
      estimatedSec: Math.round(estimate),
      loadAverage: `${loadAtStart} at the start, ${readLoadAverage()} at the end`,
      versions: packageVersions(),
      raceConcurrency,
      raceRounds,
      raceDelayMs,
      latencyRuns,
      frameworks: FRAMEWORKS,
      plans: options.plans,
      stores: [...SERVER_STORES],
      matrix: MATRIX,
      peers: SELECTED_PEERS,
    },
    raw,
    races,
    configs,
    latencies,
    skipped: skipped.map((s) => ({ framework: s.framework, plan: s.plan, impl: s.subject.impl, store: s.subject.store, reason: s.reason })),
  };

  const dir = new URL('./results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  writeFileSync(new URL('latest.json', dir), `${JSON.stringify({ ...results, rows, floors }, null, 2)}\n`);
  const resultsUrl = new URL('./RESULTS.md', import.meta.url);
  let resultsMd = writeResultsMarkdown(results, rows, notApplicable);
  if (floors) resultsMd = replaceSection(resultsMd, 'floors', floorsSection(floors));
  resultsMd = keepSections(readIfThere(resultsUrl), resultsMd);
  writeFileSync(resultsUrl, resultsMd);
  writeChart(results, new URL('./results-chart.svg', import.meta.url));
  process.stdout.write(`\n${resultsMd}\n`);
  log('written: bench/RESULTS.md, bench/results-chart.svg, bench/results/latest.json');
  log(`took ${Math.round((Date.now() - started) / 60_000)} min (estimated ${Math.ceil(estimate / 60)})`);

  const invalid = ours.filter((c) => c.problems.length > 0);
  if (invalid.length > 0) {
    // Not a missed target: these numbers measured something other than the intended workload.
    log(`error: ${invalid.length} bare/idemkit configuration(s) did not measure what they should (see "problems")`);
    process.exitCode = 1;
  }
}

function readIfThere(file: URL): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
