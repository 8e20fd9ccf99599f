/**
 * `npm run bench [-- --quick] [-- --framework=fastify] [-- --workload=replay] [-- --no-delay]`
 *
 * Measures, one configuration after another: the raw store time in-process, then for each
 * framework and workload the bare server, the memory store and the SQLite store. Writes
 * bench/results/latest.json and latest.md and prints the Markdown. Never fails on a missed target.
 */
import { execSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { parseArgs } from 'node:util';
import type { LoadSample, ServerHandle } from './harness.js';
import { CONNECTIONS, freshKey, post, replayKeys, runLoad, startServer, waitForQuiet } from './harness.js';
import { measureRawStores } from './raw-store.js';
import type { ConfigResult, ReportMeta } from './report.js';
import { buildRows, toMarkdown } from './report.js';
import type { Framework, ServerConfig, StoreKind, Workload } from './shared.js';
import { SERVER_STORES, median } from './shared.js';

const { values: flags } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    'no-delay': { type: 'boolean', default: false },
    framework: { type: 'string' },
    workload: { type: 'string' },
  },
});

function envNumber(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!(value > 0)) throw new Error(`${name} must be a positive number, got ${JSON.stringify(raw)}`);
  return value;
}

const durationSec = envNumber('BENCH_DURATION', flags.quick ? 1 : 3);
const runs = Math.round(envNumber('BENCH_RUNS', flags.quick ? 2 : 5));
const warmupSec = envNumber('BENCH_WARMUP', 1);
const rawIterations = Math.round(envNumber('BENCH_RAW_ITERATIONS', flags.quick ? 5_000 : 20_000));
/** A run during which other processes used more than this % of a core is discarded and redone. */
const noiseLimit = envNumber('BENCH_NOISE_LIMIT', 25);
const quietWaitMs = envNumber('BENCH_QUIET_WAIT', 120) * 1_000;
const MAX_RETRIES_PER_RUN = 4;
const DELAY_MS = 5;

const FRAMEWORKS: readonly Framework[] = ['fastify', 'express'];
const WORKLOADS: readonly Workload[] = ['new-key', 'replay', 'no-key'];
const STORES: readonly StoreKind[] = ['none', ...SERVER_STORES];

interface Plan {
  readonly framework: Framework;
  readonly workload: Workload;
  readonly delayMs: number;
}

function plan(): Plan[] {
  const plans: Plan[] = [];
  for (const framework of FRAMEWORKS) {
    if (flags.framework && flags.framework !== framework) continue;
    for (const workload of WORKLOADS) {
      if (!flags.workload || flags.workload === workload) plans.push({ framework, workload, delayMs: 0 });
    }
    if (!flags['no-delay'] && (!flags.workload || flags.workload === 'new-key')) plans.push({ framework, workload: 'new-key', delayMs: DELAY_MS });
  }
  return plans;
}

const log = (line: string) => process.stderr.write(`${line}\n`);

/** Proves the server answers as the workload expects before anything is timed; warms the replay keys. */
async function precheck(server: ServerHandle, store: StoreKind, workload: Workload): Promise<void> {
  const expect = (what: string, ok: boolean) => {
    if (!ok) throw new Error(`precheck failed (${store}, ${workload}): ${what}`);
  };
  if (workload === 'no-key') {
    const r = await post(server.url, undefined);
    return expect(`expected 201 without a key, got ${r.status}`, r.status === 201 && !r.replayed);
  }
  if (workload === 'new-key') {
    const key = freshKey();
    const first = await post(server.url, key);
    expect(`expected 201 for a new key, got ${first.status}`, first.status === 201 && !first.replayed);
    const again = await post(server.url, key);
    return expect('expected the same key to replay', again.status === 201 && again.replayed === (store !== 'none'));
  }
  for (const key of replayKeys) {
    const first = await post(server.url, key);
    expect(`expected 201 when warming a replay key, got ${first.status}`, first.status === 201);
  }
  for (const key of replayKeys) {
    const again = await post(server.url, key);
    expect('expected a warmed key to replay', again.status === 201 && again.replayed === (store !== 'none'));
  }
}

function problemsOf(samples: readonly LoadSample[], store: StoreKind, workload: Workload): string[] {
  const problems: string[] = [];
  const non2xx = samples.reduce((n, s) => n + s.non2xx, 0);
  const errors = samples.reduce((n, s) => n + s.errors, 0);
  if (non2xx > 0) problems.push(`${non2xx} non-2xx answers`);
  if (errors > 0) problems.push(`${errors} socket errors`);
  const handled = samples.reduce((n, s) => n + s.handled, 0);
  const completed = samples.reduce((n, s) => n + s.completed, 0);
  if (store !== 'none' && workload === 'replay') {
    if (handled > 0) problems.push(`the handler ran ${handled} times in a replay workload`);
  } else if (Math.abs(handled - completed) > 2 * CONNECTIONS * samples.length) {
    problems.push(`the handler ran ${handled} times for ${completed} answers`);
  }
  return problems;
}

async function measure({ framework, workload, delayMs }: Plan, store: StoreKind): Promise<ConfigResult> {
  const config: ServerConfig = { framework, store, delayMs, required: workload !== 'no-key' };
  const label = `${framework} ${workload}${delayMs ? ` (${delayMs} ms handler)` : ''} ${store === 'none' ? 'bare' : store}`;
  const server = await startServer(config);
  try {
    await precheck(server, store, workload);
    await waitForQuiet(noiseLimit, quietWaitMs, log);
    await runLoad(server, workload, warmupSec);
    const samples: LoadSample[] = [];
    let discardedRuns = 0;
    for (let i = 0, retries = 0; i < runs; ) {
      const s = await runLoad(server, workload, durationSec);
      const noisy = (s.otherCpuPercent ?? 0) > noiseLimit;
      log(
        `  ${label}: run ${i + 1}/${runs}: ${Math.round(s.reqPerSec)} req/s, p99 ${s.p99Ms} ms, ` +
          `server ${s.serverCpuMicrosPerReq.toFixed(1)} µs/req at ${s.serverCpuPercent.toFixed(0)} % CPU` +
          (s.otherCpuPercent === undefined ? '' : `, other ${s.otherCpuPercent.toFixed(0)} %`) +
          (noisy && retries < MAX_RETRIES_PER_RUN ? ' — noisy, discarded' : ''),
      );
      if (noisy && retries < MAX_RETRIES_PER_RUN) {
        retries++;
        discardedRuns++;
        await waitForQuiet(noiseLimit, quietWaitMs, log);
        continue;
      }
      samples.push(s);
      i++;
      retries = 0;
    }
    const rps = samples.map((s) => s.reqPerSec);
    const reqPerSec = median(rps);
    const others = samples.map((s) => s.otherCpuPercent).filter((v): v is number => v !== undefined);
    return {
      framework,
      store,
      workload,
      delayMs,
      runs: samples,
      reqPerSec,
      p50Ms: median(samples.map((s) => s.p50Ms)),
      p99Ms: median(samples.map((s) => s.p99Ms)),
      serverCpuMicrosPerReq: median(samples.map((s) => s.serverCpuMicrosPerReq)),
      serverSysMicrosPerReq: median(samples.map((s) => s.serverSysMicrosPerReq)),
      serverCpuPercent: median(samples.map((s) => s.serverCpuPercent)),
      otherCpuPercent: others.length > 0 ? median(others) : undefined,
      spreadPercent: (100 * (Math.max(...rps) - Math.min(...rps))) / reqPerSec,
      discardedRuns,
      problems: problemsOf(samples, store, workload),
    };
  } finally {
    await server.stop();
  }
}

/** A hash of src/ as measured (src/ may differ from the commit while others work), and the commit. */
function srcHash(): string {
  const hash = createHash('sha256');
  const root = new URL('../src/', import.meta.url);
  for (const file of readdirSync(root, { recursive: true, encoding: 'utf8' }).sort()) {
    const url = new URL(file, root);
    if (statSync(url).isFile()) hash.update(file).update(readFileSync(url));
  }
  return hash.digest('hex').slice(0, 12);
}

function gitHead(): string {
  try {
    const sha = execSync('git rev-parse --short HEAD', { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const dirty = execSync('git status --porcelain -- src', { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    return `${sha}${dirty ? ' + uncommitted src/ changes' : ''}`;
  } catch {
    return 'unknown commit';
  }
}

async function main(): Promise<void> {
  const codeAtStart = { head: gitHead(), src: srcHash() };
  const plans = plan();
  const perConfig = warmupSec + runs * durationSec + 1.5;
  log(
    `idemkit bench: ${plans.length * STORES.length} configurations × ~${perConfig.toFixed(0)} s ` +
      `(warm-up ${warmupSec} s + ${runs} × ${durationSec} s), ~${Math.ceil((plans.length * STORES.length * perConfig) / 60)} min`,
  );

  log(`raw store time: ${rawIterations} iterations × ${runs} repetitions…`);
  const raw = await measureRawStores(rawIterations, runs);
  for (const s of raw.stores) log(`  ${s.store}: new key ${s.newKeyMicros.toFixed(2)} µs, replay ${s.replayMicros.toFixed(2)} µs`);

  const configs: ConfigResult[] = [];
  for (const p of plans) {
    for (const store of STORES) configs.push(await measure(p, store));
  }

  const rows = buildRows(configs, raw);
  const meta: ReportMeta = {
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
  };
  const markdown = toMarkdown(meta, raw, configs, rows);
  const dir = new URL('./results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  writeFileSync(new URL('latest.json', dir), `${JSON.stringify({ meta, raw, rows, configs }, null, 2)}\n`);
  writeFileSync(new URL('latest.md', dir), `${markdown}\n`);
  process.stdout.write(`\n${markdown}\n`);
  log('written: bench/results/latest.json, bench/results/latest.md');

  const invalid = configs.filter((c) => c.problems.length > 0);
  if (invalid.length > 0) {
    // Not a missed target: these numbers measured something other than the intended workload.
    log(`error: ${invalid.length} configuration(s) did not measure what they should (see "problems")`);
    process.exitCode = 1;
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
