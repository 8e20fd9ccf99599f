/**
 * One bench server (bench/server.ts, started as harness.ts starts it: `node --import tsx`, idemkit
 * from dist/) under Valgrind's callgrind, and the controls `npm run bench:instructions` needs:
 * instrumentation off until the warm-up is over (the process then runs several times faster),
 * on and zeroed for the counted windows, a dump at the end of each, and off again; the GC probe
 * (instructions-probe.ts) over IPC; the server's own stats message.
 *
 * Three V8 flags differ from a plain `node`, all for what callgrind does to time:
 * - `--no-concurrent-recompilation`: callgrind runs one thread at a time, so a function's
 *   optimized code, compiled on a helper thread, arrived thousands of requests later than natively
 *   (the helper runs when the main thread yields), and 3,000 warm-up requests left most of the
 *   request path in baseline code. Compiled on the main thread, it is installed after as many
 *   calls as natively; the code that runs afterwards is the same optimized code, and the compile
 *   work is counted either way if it falls in a counted window.
 * - `--no-memory-reducer`: the memory reducer collects and shrinks the heap when the
 *   allocation rate, in bytes per millisecond of the wall clock, looks idle; under callgrind's
 *   slow clock a busy server looked idle to it, and every few thousand requests it ran a major GC
 *   that also shrank the young generation (4-6 scavenges per 400 requests afterwards instead of
 *   one per 2,000). A server under load natively never looks idle to it.
 * - `--min-semi-space-size=16`: V8 also shrinks the young generation when the allocation
 *   rate per millisecond is low, and under callgrind it shrank to 1 MiB, where a server under load
 *   natively keeps 16 MiB (measured: bare Fastify scavenges once per ~1,450 requests, each freeing
 *   ~12.8 MB); with 1 MiB, 4-6 scavenges per 400 requests added ~8 % to bare Fastify's count. The
 *   young generation stays at the size it has natively under load.
 */
import type { ChildProcess } from 'node:child_process';
import { execFile, spawn } from 'node:child_process';
import { appendFileSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { GcReport } from './instructions-shared.js';
import { NotApplicable } from './peers/types.js';
import type { ChildMessage, ServerConfig, StatsMessage } from './shared.js';

const run = promisify(execFile);
const SERVER_SCRIPT = fileURLToPath(new URL('./server.ts', import.meta.url));
const PROBE = fileURLToPath(new URL('./instructions-probe.ts', import.meta.url));
/** The young generation's size (one semi-space, MiB) a loaded server reaches natively on Node 20 (see above). */
export const SEMI_SPACE_MB = 16;
/** Under callgrind, with instrumentation off, the server starts in 20-40 s. */
const START_TIMEOUT_MS = 180_000;

/** Instructions counted in one dump: the whole process, and its main thread. */
export interface Counted {
  readonly total: number;
  readonly mainThread: number;
}

export interface CallgrindServer {
  readonly url: string;
  readonly pid: number;
  stats(): Promise<StatsMessage>;
  /** Turns instrumentation on and zeroes the counters: counting starts. */
  startCounting(): Promise<void>;
  /** The counts since startCounting or the last dump (a dump zeroes them); counting goes on. */
  dump(): Promise<Counted>;
  /** Turns instrumentation off. */
  stopCounting(): Promise<void>;
  gcStart(): Promise<void>;
  gcStop(): Promise<GcReport>;
  stop(): Promise<void>;
}

const NETWORK_STORES = new Set(['postgres', 'redis', 'redis-node']);

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});
// Interrupted: the servers under valgrind go too ('exit' handlers do not run on a signal's default action).
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(130));

/** Starts the server; `keepDumps` keeps callgrind's dump files in `outDir` (otherwise each is deleted once read). */
export async function startCallgrindServer(config: ServerConfig, outDir: string, keepDumps: boolean, log: (line: string) => void): Promise<CallgrindServer> {
  const args = [
    `--impl=${config.impl}`,
    `--framework=${config.framework}`,
    `--store=${config.store}`,
    `--delay=${config.delayMs}`,
    `--required=${config.required}`,
    `--nonce=${config.nonce}`,
  ];
  const valgrind = [
    '--tool=callgrind',
    // Not counted until the warm-up is over; startup and warm-up then run several times faster.
    '--instr-atstart=no',
    // One dump file per thread: the main thread's count apart from V8's and libuv's helpers.
    '--separate-threads=yes',
    `--callgrind-out-file=${join(outDir, 'callgrind.%p')}`,
    `--log-file=${join(outDir, 'valgrind.%p.log')}`,
    // tsx starts esbuild as a child process: not the server.
    '--trace-children=no',
  ];
  // BENCH_INSTR_NODE_FLAGS: more flags for the server's node, for experiments (e.g. --trace-gc --trace-deopt, with BENCH_INSTR_SERVER_LOG).
  const extra = (process.env.BENCH_INSTR_NODE_FLAGS ?? '').split(' ').filter(Boolean);
  const node = [...extra, '--no-concurrent-recompilation', '--no-memory-reducer', `--min-semi-space-size=${SEMI_SPACE_MB}`, '--import', 'tsx', '--import', PROBE];
  const child = spawn('valgrind', [...valgrind, process.execPath, ...node, SERVER_SCRIPT, ...args], {
    // A store across the network answers through this slowed-down process's own event loop: 2 minutes
    // before a 503 there (server.ts). In-process stores keep the default, as the guard's baseline was counted.
    env: { ...process.env, TSX_TSCONFIG_PATH: 'tsconfig.build.json', ...(NETWORK_STORES.has(config.store) ? { BENCH_STORE_TIMEOUT_MS: '120000' } : {}) },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  live.add(child);
  const pid = child.pid!;
  const output: string[] = [];
  const serverLog = process.env.BENCH_INSTR_SERVER_LOG;
  const keep = (chunk: Buffer) => {
    if (serverLog) appendFileSync(serverLog, chunk);
    output.push(chunk.toString());
    if (output.length > 50) output.shift();
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  let stopping = false;
  let failure: Error | undefined;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('exit', (code, signal) => {
    live.delete(child);
    if (!stopping) {
      failure = new Error(`server ${JSON.stringify(config)} under callgrind exited (code ${code}, signal ${signal}): ${output.join('').slice(-2000)}`);
    }
  });

  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start in ${START_TIMEOUT_MS / 1000} s: ${output.join('').slice(-2000)}`)), START_TIMEOUT_MS);
    child.on('message', (message: ChildMessage) => {
      if (message.type === 'not-applicable') {
        stopping = true;
        clearTimeout(timer);
        reject(new NotApplicable(message.reason));
      }
      if (message.type !== 'listening') return;
      clearTimeout(timer);
      resolve(message.port);
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(failure ?? new Error('server exited before listening'));
    });
  });

  /** Sends a message and waits for the first answer of `type`. */
  const ask = <T extends { type: string }>(message: object, type: string): Promise<T> => {
    if (failure) return Promise.reject(failure);
    return new Promise((resolve, reject) => {
      const onMessage = (answer: { type?: string }) => {
        if (answer.type !== type) return;
        child.off('message', onMessage);
        resolve(answer as T);
      };
      child.on('message', onMessage);
      child.send(message, (error) => error && reject(error));
      void exited.then(() => reject(failure ?? new Error('server exited')));
    });
  };

  const control = async (...command: string[]) => {
    const { stdout } = await run('callgrind_control', [...command, String(pid)]);
    if (!/OK\./.test(stdout)) throw new Error(`callgrind_control ${command.join(' ')}: ${stdout}`);
  };

  let dumps = 0;
  return {
    url: `http://127.0.0.1:${port}`,
    pid,
    stats: () => ask<StatsMessage>({ type: 'stats' }, 'stats'),
    async startCounting() {
      await control('--instr=on');
      await control('--zero');
    },
    async dump() {
      await control('--dump');
      dumps++;
      return readDump(outDir, pid, dumps, keepDumps, log);
    },
    async stopCounting() {
      await control('--instr=off');
    },
    async gcStart() {
      await ask({ type: 'gc-start' }, 'gc-started');
    },
    gcStop: () => ask<GcReport>({ type: 'gc-stop' }, 'gc'),
    async stop() {
      stopping = true;
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

/**
 * The totals of dump `n` of process `pid`: one file per thread (`callgrind.<pid>.<n>-<thread>`),
 * thread 01 the main thread.
 */
function readDump(outDir: string, pid: number, n: number, keep: boolean, log: (line: string) => void): Counted {
  const prefix = `callgrind.${pid}.${n}-`;
  const files = readdirSync(outDir).filter((name) => name.startsWith(prefix));
  if (files.length === 0) throw new Error(`no callgrind dump ${prefix}* in ${outDir}`);
  let total = 0;
  let mainThread = 0;
  for (const name of files) {
    const match = /^totals:\s+(\d+)/m.exec(readFileSync(join(outDir, name), 'utf8'));
    if (!keep) rmSync(join(outDir, name));
    if (!match) {
      log(`  (no totals line in ${name})`);
      continue;
    }
    const count = Number(match[1]);
    total += count;
    if (name.endsWith('-01')) mainThread = count;
  }
  return { total, mainThread };
}
