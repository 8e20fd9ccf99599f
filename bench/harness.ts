/** The child server's life cycle and one autocannon run against it. */
import type { ChildProcess } from 'node:child_process';
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { RequestSpec } from 'autocannon';
import { NotApplicable } from './peers/types.js';
import type { ChildMessage, ServerConfig, StatsMessage, TimeStoreMessage, Workload } from './shared.js';
import { BODY, CONTENTION_CONNECTIONS, CONTENTION_KEYS, CONTENT_TYPE, REPLAY_KEYS, ROUTE } from './shared.js';

export const CONNECTIONS = 50;
const SERVER_SCRIPT = fileURLToPath(new URL('./server.ts', import.meta.url));
const START_TIMEOUT_MS = 30_000;

export interface ServerHandle {
  readonly url: string;
  /** The control server: `GET ${controlUrl}/__executions?key=…`. */
  readonly controlUrl: string;
  stats(): Promise<StatsMessage>;
  /** Turns the server's store timing on or off (`StatsMessage.storeMicros`). */
  timeStore(on: boolean): Promise<void>;
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** Starts one server process; rejects with `NotApplicable` when the implementation cannot serve the configuration. */
export async function startServer(config: ServerConfig, variant = ''): Promise<ServerHandle> {
  const args = [
    `--impl=${config.impl}`,
    `--framework=${config.framework}`,
    `--store=${config.store}`,
    `--delay=${config.delayMs}`,
    `--required=${config.required}`,
    `--nonce=${config.nonce}`,
    `--variant=${variant}`,
  ];
  const child = fork(SERVER_SCRIPT, args, {
    // idemkit from dist/, as users run it: tsconfig.build.json maps no `idemkit/*` paths to src/
    // (tsx's keepNames wrappers would otherwise cost the middleware, and only it, a few µs).
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, TSX_TSCONFIG_PATH: 'tsconfig.build.json' },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  live.add(child);
  let stopping = false;
  let failure: Error | undefined;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('exit', (code, signal) => {
    live.delete(child);
    if (!stopping) failure = new Error(`bench server ${JSON.stringify(config)} exited (code ${code}, signal ${signal})`);
  });

  const ports = await new Promise<{ port: number; controlPort: number }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('bench server did not start in time')), START_TIMEOUT_MS);
    child.on('message', (message: ChildMessage) => {
      if (message.type === 'not-applicable') {
        stopping = true;
        clearTimeout(timer);
        reject(new NotApplicable(message.reason));
      }
      if (message.type !== 'listening') return;
      clearTimeout(timer);
      resolve(message);
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(failure ?? new Error('bench server exited before listening'));
    });
  });

  return {
    url: `http://127.0.0.1:${ports.port}`,
    controlUrl: `http://127.0.0.1:${ports.controlPort}`,
    stats() {
      if (failure) return Promise.reject(failure);
      return new Promise((resolve, reject) => {
        const onMessage = (message: ChildMessage) => {
          if (message.type !== 'stats') return;
          child.off('message', onMessage);
          resolve(message);
        };
        child.on('message', onMessage);
        child.send({ type: 'stats' }, (error) => error && reject(error));
        void exited.then(() => reject(failure ?? new Error('bench server exited')));
      });
    },
    timeStore(on) {
      const message: TimeStoreMessage = { type: 'time-store', on };
      return new Promise((resolve, reject) => child.send(message, (error) => (error ? reject(error) : resolve())));
    },
    async stop() {
      stopping = true;
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

/** In every key this run sends: servers delete what they stored under it when they exit. */
export const nonce = randomBytes(4).toString('hex');
let counter = 0;
/** A key never sent before in this bench run. */
export function freshKey(): string {
  return `bench-${nonce}-${(counter++).toString(36)}`;
}

let contentionSent = 0;

export const replayKeys = Array.from({ length: REPLAY_KEYS }, (_, i) => `replay-${nonce}-${i}`);

const baseHeaders = { 'content-type': CONTENT_TYPE };

/** The request sequence of a workload; the bare server gets the very same requests. */
export function requestsFor(workload: Workload): RequestSpec[] {
  const request = { method: 'POST', path: ROUTE, body: BODY };
  switch (workload) {
    case 'new-key':
      return [
        {
          ...request,
          headers: baseHeaders,
          setupRequest(params) {
            params.headers['idempotency-key'] = freshKey();
            return params;
          },
        },
      ];
    case 'replay':
      return replayKeys.map((key) => ({ ...request, headers: { ...baseHeaders, 'idempotency-key': key } }));
    case 'contention': {
      // 64 connections on 8 keys: each batch of 64 consecutive requests shares 8 fresh keys (8 each),
      // so duplicates of a key are in flight together; the key set then moves on (never back: the
      // counter is shared by every run).
      return [
        {
          ...request,
          headers: baseHeaders,
          setupRequest(params) {
            const n = contentionSent++;
            params.headers['idempotency-key'] = `ct-${nonce}-${Math.floor(n / CONTENTION_CONNECTIONS).toString(36)}-${n % CONTENTION_KEYS}`;
            return params;
          },
        },
      ];
    }
    case 'no-key':
      return [{ ...request, headers: baseHeaders }];
  }
}

export function connectionsFor(workload: Workload): number {
  return workload === 'contention' ? CONTENTION_CONNECTIONS : CONNECTIONS;
}

export interface LoadSample {
  readonly reqPerSec: number;
  readonly completed: number;
  readonly durationSec: number;
  /** Milliseconds (autocannon's resolution is 1 ms). */
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly non2xx: number;
  readonly errors: number;
  /** Answers per HTTP status. */
  readonly statuses: Readonly<Record<string, number>>;
  /** Handler executions beyond the first for tracked keys (contention): double executions. */
  readonly duplicates: number;
  /** Server CPU (user + system) per completed request, µs. */
  readonly serverCpuMicrosPerReq: number;
  /** The kernel part of it (socket writes, wake-ups, GC threads' syscalls), µs. */
  readonly serverSysMicrosPerReq: number;
  /** Server CPU time over wall time: ~100 % when the single-threaded server is the bottleneck. */
  readonly serverCpuPercent: number;
  /**
   * CPU used on the machine by processes other than the server, this one and the store servers
   * (redis-server, postgres, mariadbd: their work is part of what is measured), in % of one core.
   */
  readonly otherCpuPercent: number | undefined;
  /** CPU used by the store servers during the run, in % of one core. */
  readonly storeCpuPercent: number | undefined;
  /** Handler executions during the run. */
  readonly handled: number;
  /** Server resident memory at the end of the run. */
  readonly serverRssBytes: number;
}

export async function runLoad(server: ServerHandle, workload: Workload, durationSec: number): Promise<LoadSample> {
  const before = await server.stats();
  const machineBefore = machineBusyMicros();
  const storesBefore = storeServersMicros();
  const selfBefore = process.cpuUsage();
  const started = process.hrtime.bigint();
  const result = await autocannon({
    url: server.url,
    connections: connectionsFor(workload),
    pipelining: 1,
    duration: durationSec,
    requests: requestsFor(workload),
  });
  const wallMicros = Number(process.hrtime.bigint() - started) / 1e3;
  const self = process.cpuUsage(selfBefore);
  const machineAfter = machineBusyMicros();
  const storesAfter = storeServersMicros();
  const after = await server.stats();
  const serverSys = after.systemMicros - before.systemMicros;
  const serverCpu = after.userMicros - before.userMicros + serverSys;
  const completed = result.requests.total;
  const storeCpu = storeCpuBetween(storesBefore, storesAfter);
  const otherCpu =
    machineBefore === undefined || machineAfter === undefined
      ? undefined
      : Math.max(0, machineAfter - machineBefore - serverCpu - self.user - self.system - (storeCpu ?? 0));
  return {
    reqPerSec: completed / result.duration,
    completed,
    durationSec: result.duration,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
    statuses: Object.fromEntries(Object.entries(result.statusCodeStats).map(([code, { count }]) => [code, count])),
    duplicates: after.duplicates - before.duplicates,
    serverCpuMicrosPerReq: completed > 0 ? serverCpu / completed : NaN,
    serverSysMicrosPerReq: completed > 0 ? serverSys / completed : NaN,
    serverCpuPercent: (100 * serverCpu) / wallMicros,
    otherCpuPercent: otherCpu === undefined ? undefined : (100 * otherCpu) / wallMicros,
    storeCpuPercent: storeCpu === undefined ? undefined : (100 * storeCpu) / wallMicros,
    handled: after.handled - before.handled,
    serverRssBytes: after.rssBytes,
  };
}

/**
 * Waits until processes other than the bench use less than `limitPercent` of one core (other
 * engineers' test runs share the machine), sampling for 0.5 s at a time, for at most `maxWaitMs`.
 * Returns false when it gave up (the caller measures anyway; every run records the others' CPU use).
 */
export async function waitForQuiet(limitPercent: number, maxWaitMs: number, log: (line: string) => void): Promise<boolean> {
  const deadline = Date.now() + maxWaitMs;
  let warned = false;
  // Two quiet half-seconds in a row: other test runs come in bursts.
  for (let quiet = 0; quiet < 2; ) {
    const busyBefore = machineBusyMicros();
    const selfBefore = process.cpuUsage();
    const started = process.hrtime.bigint();
    await sleep(500);
    const busyAfter = machineBusyMicros();
    if (busyBefore === undefined || busyAfter === undefined) return true;
    const self = process.cpuUsage(selfBefore);
    const wall = Number(process.hrtime.bigint() - started) / 1e3;
    const other = (100 * (busyAfter - busyBefore - self.user - self.system)) / wall;
    if (other < limitPercent) {
      quiet++;
      continue;
    }
    quiet = 0;
    if (Date.now() > deadline) return false;
    if (!warned) log(`  machine busy (other processes use ${other.toFixed(0)} % of a core): waiting for it to calm down…`);
    warned = true;
  }
  return true;
}

/** Busy CPU time of the whole machine from /proc/stat, in µs (undefined off Linux). */
function machineBusyMicros(): number | undefined {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = fields;
    return (user + nice + system + irq + softirq + steal) * 10_000; // USER_HZ = 100
  } catch {
    return undefined;
  }
}

const STORE_SERVER_COMMANDS = new Set(['redis-server', 'postgres', 'mariadbd', 'mysqld']);

/**
 * CPU time used so far by each running store server process (pid → µs), from /proc; undefined off
 * Linux. A PostgreSQL backend that starts and ends within one run is missed (the bench's pools
 * keep theirs open).
 */
function storeServersMicros(): Map<number, number> | undefined {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((name) => /^\d+$/.test(name));
  } catch {
    return undefined;
  }
  const used = new Map<number, number>();
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    const open = stat.indexOf('(');
    const close = stat.lastIndexOf(')');
    if (!STORE_SERVER_COMMANDS.has(stat.slice(open + 1, close))) continue;
    // After the command: state is field 3, utime and stime are fields 14 and 15.
    const fields = stat.slice(close + 2).split(' ');
    used.set(Number(pid), (Number(fields[11]) + Number(fields[12])) * 10_000); // USER_HZ = 100
  }
  return used;
}

function storeCpuBetween(before: Map<number, number> | undefined, after: Map<number, number> | undefined): number | undefined {
  if (before === undefined || after === undefined) return undefined;
  let total = 0;
  for (const [pid, micros] of after) total += micros - (before.get(pid) ?? 0);
  return total;
}

/** One request, for the sanity checks before measuring. */
export async function post(
  url: string,
  key: string | undefined,
  timeoutMs = 10_000,
): Promise<{ status: number; replayed: boolean; id: string | undefined }> {
  const headers: Record<string, string> = { 'content-type': CONTENT_TYPE };
  if (key !== undefined) headers['idempotency-key'] = key;
  const response = await fetch(url + ROUTE, { method: 'POST', headers, body: BODY, signal: AbortSignal.timeout(timeoutMs) });
  const text = await response.text();
  let id: string | undefined;
  try {
    id = (JSON.parse(text) as { id?: string }).id;
  } catch {
    id = undefined;
  }
  return { status: response.status, replayed: response.headers.get('idempotent-replayed') === 'true', id };
}

/** How many times the server's handler ran for `key` (tracked keys only). */
export async function executionsOf(server: ServerHandle, key: string): Promise<number> {
  const response = await fetch(`${server.controlUrl}/__executions?key=${encodeURIComponent(key)}`);
  return ((await response.json()) as { executions: number }).executions;
}
