/**
 * `npm run bench:recovery`: the seeds' two-phase payment (local write → foreign charge → local
 * write) built with idemkit and with DBOS Transact, driven by one client process while the worker
 * serving the orders is SIGKILLed mid-run and restarted. Counts double charges and lost orders
 * (the bench fails if either is not 0), and times throughput and recovery. docs/recovery.md has
 * the results and what each column means.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createWriteStream, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import type { WriteStream } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { createInterface } from 'node:readline';
import type { AppConfig, Order } from './app.js';
import { waitForQuiet } from '../harness.js';
import { placeAll } from './client.js';
import type { Outcome } from './client.js';
import { BenchDatabase, DBOS_SCHEMA, IDEMKIT_TABLE, ORDERS_TABLE } from './db.js';
import { startPaymentService } from './foreign.js';
import type { PaymentService } from './foreign.js';
import { codeLines } from './lines.js';
import { VARIANTS } from './variants.js';
import type { Variant } from './variants.js';

const HERE = import.meta.dirname;
const ROOT = join(HERE, '..', '..');
const RESULTS = join(ROOT, 'bench', 'results');
const APP_FILES = { idemkit: join(HERE, 'app-idemkit.ts'), dbos: join(HERE, 'app-dbos.ts') } as const;

function envNumber(name: string, fallback: number, min: number): number {
  const text = process.env[name];
  if (text === undefined || text === '') return fallback;
  const value = Number(text);
  if (!Number.isFinite(value) || value < min) throw new Error(`${name} must be a number ≥ ${min}, got ${JSON.stringify(text)}`);
  return value;
}

const options = {
  orders: Math.floor(envNumber('BENCH_ORDERS', 500, 2)),
  concurrency: Math.floor(envNumber('BENCH_CONCURRENCY', 16, 1)),
  /** Runs of each kind (without a crash, with one) per variant. */
  runs: Math.floor(envNumber('BENCH_RUNS', 2, 1)),
  /** Orders placed on a fresh worker before the measured ones (not timed, but verified). */
  warmup: Math.floor(envNumber('BENCH_WARMUP', 50, 0)),
  /** The worker is killed once this share of the measured orders has been answered. */
  killAt: envNumber('BENCH_KILL_AT', 0.5, 0),
  /** The payment service's answer time. */
  foreignMs: envNumber('BENCH_FOREIGN_MS', 20, 0),
  /** An order not answered this long after it was first sent is lost. */
  orderTimeoutMs: envNumber('BENCH_ORDER_TIMEOUT', 120, 1) * 1000,
  /** Before each run, wait until other processes use less than this share of a core (as bench/run.ts does)… */
  noiseLimit: envNumber('BENCH_NOISE_LIMIT', 25, 0),
  /** …for at most this long (s), then measure anyway and mark the run busy. */
  quietWaitMs: envNumber('BENCH_QUIET_WAIT', 15, 0) * 1000,
  databaseUrl: process.env.BENCH_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432/test',
  variants: (process.env.BENCH_VARIANTS || 'all').split(',').map((v) => v.trim()),
};
if (options.killAt >= 1) throw new Error('BENCH_KILL_AT must be below 1 (a share of the orders)');

interface Worker {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly exited: Promise<void>;
}

/** Starts a worker and resolves when it serves; its output goes to `log`. */
async function startWorker(app: Variant['app'], config: AppConfig, log: WriteStream): Promise<Worker> {
  const child = spawn(process.execPath, [...process.execArgv, join(HERE, 'worker.ts')], {
    cwd: ROOT,
    env: { ...process.env, RECOVERY_APP: app, RECOVERY_CONFIG: JSON.stringify(config) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.stderr!.pipe(log, { end: false });
  const lines = createInterface({ input: child.stdout! });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the ${app} worker did not start within 120 s (see ${log.path as string})`)), 120_000);
    lines.on('line', (line) => {
      log.write(`${line}\n`);
      if (line === 'ready') {
        clearTimeout(timer);
        resolve();
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`the ${app} worker exited before it served (code ${child.exitCode}; see ${log.path as string})`));
    });
  });
  return { child, pid: child.pid!, exited };
}

async function stopWorker(worker: Worker | undefined): Promise<void> {
  if (!worker || worker.child.exitCode !== null || worker.child.signalCode !== null) return;
  process.kill(worker.pid, 'SIGKILL');
  await worker.exited;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

interface Crash {
  /** Orders sent and not yet answered when the worker was killed. */
  readonly inFlight: string[];
  readonly killedAt: number;
  /** When the replacement was spawned. */
  readonly restartAt: number;
  /** When it served again. */
  readonly readyAt: number;
}

interface RunResult {
  readonly variant: string;
  readonly crash: boolean;
  /** False when other processes were still busy after BENCH_QUIET_WAIT: the run was measured anyway. */
  readonly quiet: boolean;
  readonly orders: number;
  readonly seconds: number;
  readonly ordersPerSecond: number;
  readonly inFlightAtKill?: number;
  readonly servingMs?: number;
  /** Restart → the last in-flight order's final local write (its charged_at). */
  readonly doneMs?: number;
  /** Restart → the last in-flight order's answer at the client. */
  readonly answeredMs?: number;
  readonly doubleCharges: number;
  readonly lost: number;
  readonly duplicateWrites: number;
  /** Calls to the payment service beyond one per order: repeats it deduplicated. */
  readonly repeatedCalls: number;
  readonly problems: string[];
}

const prefix = `rb${Date.now().toString(36)}-`;
const db = new BenchDatabase(options.databaseUrl);
let current: Worker | undefined;

async function runOnce(variant: Variant, crash: boolean, index: number, port: number, quiet: boolean): Promise<RunResult> {
  const runPrefix = `${prefix}${variant.id}-${index}${crash ? 'c' : 'n'}-`;
  await db.reset(prefix);
  const service: PaymentService = await startPaymentService(options.foreignMs);
  const config: AppConfig = {
    port,
    databaseUrl: options.databaseUrl,
    foreignUrl: service.url,
    ordersTable: ORDERS_TABLE,
    stateName: variant.app === 'idemkit' ? IDEMKIT_TABLE : DBOS_SCHEMA,
    options: variant.options as Record<string, unknown>,
  };
  mkdirSync(join(RESULTS, 'recovery-logs'), { recursive: true });
  const log = createWriteStream(join(RESULTS, 'recovery-logs', `${variant.id}-${index}${crash ? '-crash' : ''}.log`));
  const base = `http://127.0.0.1:${port}`;
  const makeOrders = (tag: string, count: number): Order[] => Array.from({ length: count }, (_, i) => ({ orderId: `${runPrefix}${tag}${i}`, amount: 100 + (i % 900) }));
  try {
    current = await startWorker(variant.app, config, log);
    const inFlight = new Set<string>();
    const warm = await placeAll(base, makeOrders('w', options.warmup), { concurrency: options.concurrency, deadlineMs: options.orderTimeoutMs, inFlight });

    const orders = makeOrders('o', options.orders);
    const killAfter = Math.max(1, Math.floor(options.orders * options.killAt));
    let answered = 0;
    let crashing: Promise<Crash> | undefined;
    const killAndRestart = async (): Promise<Crash> => {
      const inFlightNow = [...inFlight];
      const killedAt = Date.now();
      log.write(`--- SIGKILL ${current!.pid}\n`);
      process.kill(current!.pid, 'SIGKILL');
      await current!.exited;
      const restartAt = Date.now();
      current = await startWorker(variant.app, config, log);
      return { inFlight: inFlightNow, killedAt, restartAt, readyAt: Date.now() };
    };
    let restartFailed: unknown;
    const started = Date.now();
    const measured = await placeAll(base, orders, {
      concurrency: options.concurrency,
      deadlineMs: options.orderTimeoutMs,
      inFlight,
      onDone: (outcome) => {
        if (outcome.answer) answered++;
        if (crash && !crashing && answered >= killAfter) {
          crashing = killAndRestart();
          crashing.catch((error: unknown) => {
            restartFailed = error;
          });
        }
      },
    });
    const seconds = (Date.now() - started) / 1000;
    if (restartFailed !== undefined) throw restartFailed;
    const crashed = crashing ? await crashing : undefined;
    if (crash && !crashed) throw new Error('the worker was never killed: fewer orders were answered than BENCH_KILL_AT asks');

    const outcomes = [...warm, ...measured];
    const rows = await db.orders(runPrefix);
    const problems: string[] = [];
    let doubleCharges = 0;
    let lost = 0;
    let duplicateWrites = 0;
    const known = new Set(outcomes.map((o) => o.orderId));
    for (const [orderId, charges] of service.charges) if (!known.has(orderId)) problems.push(`${orderId}: charged ${charges.length}× but never ordered`);
    for (const outcome of outcomes) {
      const charges = service.charges.get(outcome.orderId) ?? [];
      const row = rows.get(outcome.orderId);
      if (charges.length > 1) {
        doubleCharges++;
        problems.push(`${outcome.orderId}: charged ${charges.length}× (${charges.join(', ')})`);
      }
      if (!outcome.answer || !row || row.charged === 0 || charges.length === 0) {
        lost++;
        problems.push(`${outcome.orderId}: lost (answer ${outcome.answer ? 'yes' : `none, last ${outcome.lastError ?? '-'}`}, row ${row ? `charged ${row.charged}` : 'none'}, charges ${charges.length})`);
        continue;
      }
      if (row.rows > 1 || row.charged > 1) {
        duplicateWrites++;
        problems.push(`${outcome.orderId}: ${row.rows} order rows, charge recorded ${row.charged}×`);
      }
      if (outcome.answer.chargeId !== charges[0] || row.chargeId !== charges[0]) {
        problems.push(`${outcome.orderId}: the answer says ${outcome.answer.chargeId}, the row ${row.chargeId}, the payment service ${charges[0]}`);
      }
    }
    let repeatedCalls = 0;
    for (const calls of service.calls.values()) repeatedCalls += calls - 1;

    const result: RunResult = {
      variant: variant.id,
      crash,
      quiet,
      orders: options.orders,
      seconds,
      ordersPerSecond: options.orders / seconds,
      doubleCharges,
      lost,
      duplicateWrites,
      repeatedCalls,
      problems,
      ...(crashed && recoveryTimes(crashed, outcomes, rows)),
    };
    return result;
  } finally {
    await stopWorker(current);
    current = undefined;
    await service.close();
    log.end();
  }
}

function recoveryTimes(crash: Crash, outcomes: readonly Outcome[], rows: Awaited<ReturnType<BenchDatabase['orders']>>) {
  const byId = new Map(outcomes.map((o) => [o.orderId, o]));
  let done = -Infinity;
  let answered = -Infinity;
  for (const id of crash.inFlight) {
    done = Math.max(done, (rows.get(id)?.chargedAt ?? Infinity) - crash.restartAt);
    answered = Math.max(answered, (byId.get(id)?.answeredAt ?? Infinity) - crash.restartAt);
  }
  // An order can have committed before the restart (answer lost with the process): 0, not negative.
  return {
    inFlightAtKill: crash.inFlight.length,
    servingMs: crash.readyAt - crash.restartAt,
    doneMs: Math.max(0, done),
    answeredMs: Math.max(0, answered),
  };
}

const median = (values: readonly number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
const seconds = (ms: number) => (ms / 1000).toFixed(1);
/** "median (min–max)" of the runs, or the one value. */
function spread(values: readonly number[], format: (v: number) => string): string {
  if (values.length === 0) return 'n/a';
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  return values.length === 1 || format(lo) === format(hi) ? format(median(values)) : `${format(median(values))} (${format(lo)}–${format(hi)})`;
}

async function describeMachine(): Promise<string[]> {
  const cpus = os.cpus();
  const { rows } = await db.pool.query<{ server_version: string }>('SHOW server_version');
  const dbos = (JSON.parse(readFileSync(join(ROOT, 'node_modules', '@dbos-inc', 'dbos-sdk', 'package.json'), 'utf8')) as { version: string }).version;
  const knex = (JSON.parse(readFileSync(join(ROOT, 'node_modules', '@dbos-inc', 'knex-datasource', 'package.json'), 'utf8')) as { version: string }).version;
  return [
    `date: ${new Date().toISOString()}`,
    `machine: ${cpus.length} × ${cpus[0]?.model ?? 'unknown CPU'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.type()} ${os.release()}`,
    `node ${process.version}, PostgreSQL ${rows[0]!.server_version}, @dbos-inc/dbos-sdk ${dbos}, @dbos-inc/knex-datasource ${knex}`,
    `orders ${options.orders} (+${options.warmup} warm-up) at concurrency ${options.concurrency}, runs ${options.runs} of each kind, kill after ${Math.round(options.killAt * 100)} % answered, payment service ${options.foreignMs} ms`,
  ];
}

async function main(): Promise<void> {
  const chosen = VARIANTS.filter((v) => options.variants.includes('all') || options.variants.includes(v.id));
  if (chosen.length === 0) throw new Error(`BENCH_VARIANTS names none of ${VARIANTS.map((v) => v.id).join(', ')}`);
  const active: Variant[] = [];
  const skipped: string[] = [];
  for (const variant of chosen) {
    const reason = variant.available ? await variant.available() : undefined;
    if (reason === undefined) active.push(variant);
    else {
      const line = `${variant.label}: ${variant.unavailable ?? 'not available'} (${reason})`;
      skipped.push(line);
      console.log(`skipped ${line}`);
    }
  }
  const lines = { idemkit: codeLines(readFileSync(APP_FILES.idemkit, 'utf8')), dbos: codeLines(readFileSync(APP_FILES.dbos, 'utf8')) };

  await db.setUp();
  const header = await describeMachine();
  for (const line of header) console.log(line);
  const results: RunResult[] = [];
  try {
    for (let index = 1; index <= options.runs; index++) {
      for (const variant of active) {
        for (const crash of [false, true]) {
          const quiet = await waitForQuiet(options.noiseLimit, options.quietWaitMs, (line) => console.log(line));
          const result = await runOnce(variant, crash, index, await freePort(), quiet);
          results.push(result);
          const recovery = crash
            ? `, ${result.inFlightAtKill} in flight at the kill, serving ${seconds(result.servingMs!)} s after the restart, in-flight done ${seconds(result.doneMs!)} s, answered ${seconds(result.answeredMs!)} s`
            : '';
          console.log(
            `${variant.id} run ${index}${crash ? ' (crash)' : ''}: ${result.orders} orders in ${result.seconds.toFixed(1)} s (${result.ordersPerSecond.toFixed(0)}/s)${recovery}, ` +
              `${result.doubleCharges} double charges, ${result.lost} lost, ${result.repeatedCalls} repeated foreign calls${quiet ? '' : ' (machine busy)'}`,
          );
          for (const problem of result.problems.slice(0, 10)) console.log(`  ${problem}`);
        }
      }
    }
  } finally {
    await stopWorker(current);
    await db.tearDown(prefix);
  }

  const table = [
    '| implementation | orders/s, no crash | orders/s, crash runs | in flight at the kill | restart → serving (s) | restart → in-flight done (s) | restart → in-flight answered (s) | double charges | lost orders | repeated foreign calls | user code lines |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  const whole = (v: number) => v.toFixed(0);
  for (const variant of active) {
    const mine = results.filter((r) => r.variant === variant.id);
    const crashes = mine.filter((r) => r.crash);
    const total = (pick: (r: RunResult) => number) => String(mine.reduce((sum, r) => sum + pick(r), 0));
    const cells = [
      variant.label,
      spread(mine.filter((r) => !r.crash).map((r) => r.ordersPerSecond), whole),
      spread(crashes.map((r) => r.ordersPerSecond), whole),
      spread(crashes.map((r) => r.inFlightAtKill!), whole),
      spread(crashes.map((r) => r.servingMs!), seconds),
      spread(crashes.map((r) => r.doneMs!), seconds),
      spread(crashes.map((r) => r.answeredMs!), seconds),
      total((r) => r.doubleCharges),
      total((r) => r.lost),
      total((r) => r.repeatedCalls),
      String(lines[variant.app]),
    ];
    table.push(`| ${cells.join(' | ')} |`);
  }
  const report = [...header.map((line) => `- ${line}`), '', ...table, ...skipped.map((line) => `\nSkipped: ${line}.`)].join('\n');
  console.log(`\n${report}\n`);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, 'recovery.md'), `${report}\n`);
  writeFileSync(join(RESULTS, 'recovery.json'), `${JSON.stringify({ header, options, skipped, lines, results }, null, 2)}\n`);

  const failures = results.filter((r) => r.doubleCharges > 0 || r.lost > 0 || r.duplicateWrites > 0 || r.problems.length > 0);
  if (failures.length > 0) {
    for (const r of failures) {
      console.error(
        `FAIL ${r.variant}${r.crash ? ' (crash run)' : ''}: ${r.doubleCharges} double charges, ${r.lost} lost orders, ${r.duplicateWrites} duplicated local writes, ${r.problems.length} problems`,
      );
    }
    process.exitCode = 1;
  }
}

await main();
