/**
 * Latency at a fixed request rate (open loop), for the latency targets.
 *
 * Why not autocannon's `overallRate`: it gives each connection a budget per second, and a
 * connection spends it back to back from the start of each second, then idles. At half the maximum
 * rate that is full load for half of every second, so latency would be queueing again. This sends
 * requests on a schedule instead (every millisecond, the requests due by then), over a pool of
 * keep-alive connections (a new one whenever none is free), and measures each latency from the
 * moment the sender picked the request up, so a slow server cannot hide its delay by slowing the
 * sender down (no coordinated omission), and the timer's millisecond granularity is not counted as
 * latency. Microsecond resolution.
 *
 * Why raw sockets and not node:http: the sender shares this 2-core machine with the server and
 * the store, so what it costs per request is taken from them. node:http's client cost about a core
 * at 28k req/s, and at half of bare Fastify's maximum the sender, the server and Redis together
 * needed more than the machine has (the sender reached 16k of the 28k req/s it was asked for),
 * so the latencies measured queueing on the CPU, not the middleware. Here a request is one string
 * written to an idle connection and an answer is found by its length: a few µs each.
 */
import type { Socket } from 'node:net';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ServerHandle } from './harness.js';
import { freshKey, replayKeys } from './harness.js';
import type { Workload } from './shared.js';
import { BODY, CONTENT_TYPE, ROUTE } from './shared.js';

export interface PacedSample {
  readonly targetRate: number;
  readonly achievedRate: number;
  readonly completed: number;
  readonly errors: number;
  readonly non2xx: number;
  /** Microseconds, from the time the sender picked the request up (see `send`) to the end of the response. */
  readonly p50Micros: number;
  readonly p99Micros: number;
}

/** Beyond this many connections, due requests wait for a free one (their latency still counts). */
const MAX_CONNECTIONS = 512;
const HEADER_END = Buffer.from('\r\n\r\n');
const CHUNKED_END = Buffer.from('\r\n0\r\n\r\n');
/** After the last scheduled send, how long answers are awaited; the rest count as errors (a hung server). */
const DRAIN_TIMEOUT_MS = 10_000;

/** One keep-alive connection carrying one request at a time. */
interface Connection {
  readonly socket: Socket;
  /** When the request in flight started (ns from the start of the run), or -1 when idle. */
  startNs: number;
  received: Buffer;
}

/** The length of the complete response at the start of `data`, or -1 while it is incomplete. */
export function responseLength(data: Buffer): number {
  const headerEnd = data.indexOf(HEADER_END);
  if (headerEnd < 0) return -1;
  const head = data.toString('latin1', 0, headerEnd).toLowerCase();
  const length = /\r\ncontent-length: *(\d+)/.exec(head);
  if (length) {
    const total = headerEnd + 4 + Number(length[1]);
    return data.length >= total ? total : -1;
  }
  if (head.includes('\r\ntransfer-encoding: chunked')) {
    const end = data.indexOf(CHUNKED_END, headerEnd);
    return end < 0 ? -1 : end + CHUNKED_END.length;
  }
  return headerEnd + 4; // no body (204, 304)
}

export async function runPaced(server: Pick<ServerHandle, 'url'>, workload: Workload, rate: number, durationSec: number): Promise<PacedSample> {
  const url = new URL(server.url);
  const port = Number(url.port);
  const host = url.hostname;
  const head = `POST ${ROUTE} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: ${CONTENT_TYPE}\r\nContent-Length: ${Buffer.byteLength(BODY)}\r\n`;
  const latencies: number[] = [];
  let errors = 0;
  let non2xx = 0;
  let replayIndex = 0;
  const start = process.hrtime.bigint();
  const elapsedNs = () => Number(process.hrtime.bigint() - start);
  const requestText = (): string => {
    const key = workload === 'new-key' ? freshKey() : workload === 'replay' ? replayKeys[replayIndex++ % replayKeys.length] : undefined;
    return key === undefined ? `${head}\r\n${BODY}` : `${head}Idempotency-Key: ${key}\r\n\r\n${BODY}`;
  };

  const idle: Connection[] = [];
  const all = new Set<Connection>();
  /** Start times of due requests waiting for a connection. */
  const waiting: number[] = [];
  let waitingHead = 0;
  let outstanding = 0;
  let allDone: (() => void) | undefined;
  let closing = false;

  const finishOne = () => {
    outstanding--;
    if (outstanding === 0) allDone?.();
  };
  const dispatch = (conn: Connection, startNs: number) => {
    conn.startNs = startNs;
    conn.socket.write(requestText(), 'latin1');
  };
  const release = (conn: Connection) => {
    if (waitingHead < waiting.length) dispatch(conn, waiting[waitingHead++]!);
    else idle.push(conn);
  };
  const open = (startNs: number) => {
    const socket = connect({ host, port, noDelay: true });
    // In flight from the start: a connection that fails before it connects counts as an error.
    const conn: Connection = { socket, startNs, received: Buffer.alloc(0) };
    all.add(conn);
    socket.once('connect', () => dispatch(conn, startNs));
    socket.on('data', (chunk: Buffer) => {
      conn.received = conn.received.length === 0 ? chunk : Buffer.concat([conn.received, chunk]);
      const length = responseLength(conn.received);
      if (length < 0) return;
      const status = Number(conn.received.toString('latin1', 9, 12));
      if (!(status >= 200 && status <= 299)) non2xx++;
      latencies.push((elapsedNs() - conn.startNs) / 1e3);
      conn.received = length === conn.received.length ? Buffer.alloc(0) : conn.received.subarray(length);
      conn.startNs = -1;
      finishOne();
      release(conn);
    });
    const fail = () => {
      if (closing || !all.delete(conn)) return;
      const index = idle.indexOf(conn);
      if (index >= 0) idle.splice(index, 1);
      if (conn.startNs >= 0) {
        errors++;
        finishOne();
      }
      socket.destroy();
    };
    socket.on('error', fail);
    socket.on('close', fail);
  };
  // The clock of a request starts when the sender picks it up, within a tick of its scheduled time;
  // from there it runs whether or not a connection is free.
  const send = () => {
    outstanding++;
    const startNs = elapsedNs();
    const conn = idle.pop();
    if (conn) dispatch(conn, startNs);
    else if (all.size < MAX_CONNECTIONS) open(startNs);
    else waiting.push(startNs);
  };

  const intervalNs = 1e9 / rate;
  const total = Math.round(rate * durationSec);
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor(elapsedNs() / intervalNs) + 1);
    for (; sent < due; sent++) send();
    await sleep(1);
  }
  if (outstanding > 0) {
    const drained = new Promise<void>((resolve) => (allDone = resolve));
    const timeout = new AbortController();
    await Promise.race([drained, sleep(DRAIN_TIMEOUT_MS, undefined, { signal: timeout.signal }).catch(() => {})]);
    timeout.abort(); // the timer would otherwise keep the process alive
  }
  const elapsedSec = elapsedNs() / 1e9;
  errors += outstanding;
  closing = true;
  for (const conn of all) conn.socket.destroy();
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => (latencies.length === 0 ? NaN : latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))]!);
  return {
    targetRate: rate,
    achievedRate: latencies.length / elapsedSec,
    completed: latencies.length,
    errors,
    non2xx,
    p50Micros: pct(0.5),
    p99Micros: pct(0.99),
  };
}
