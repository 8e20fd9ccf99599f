/**
 * The load of `npm run bench:instructions`: a fixed number of requests at a time, closed loop, on
 * keep-alive connections that stay open from the warm-up to the last window.
 *
 * Why not autocannon, as the throughput bench: each autocannon run opens its connections and closes
 * them at its end, and in the server closing them changes the shape of objects that optimized code
 * depends on (node:http's parser and socket callbacks: V8 logs "marking dependent code for
 * deoptimization, reason: code dependencies" as the warm-up's connections close). The counted
 * window then started with the hottest code deoptimized, and it took another 2,000-3,000 requests
 * to be optimized again. Here a window ends by waiting for its last answers; the connections stay
 * open (idle for the second or two the controls take) and the next window goes on with them.
 *
 * A request is one string written to the socket and an answer is found by its length (paced.ts).
 */
import type { Socket } from 'node:net';
import { connect } from 'node:net';
import { freshKey, replayKeys } from './harness.js';
import type { InstrWorkload } from './instructions-shared.js';
import { responseLength } from './paced.js';
import { BODY, CONTENT_TYPE, ROUTE } from './shared.js';

export interface Load {
  /** Sends `amount` requests, each connection its next one as soon as its answer is complete; resolves when all are answered. */
  run(amount: number): Promise<void>;
  /** Connections the server closed so far (each reopened): 0 when the warm-up's code stayed as it was. */
  readonly reconnects: number;
  close(): void;
}

interface Connection {
  socket: Socket;
  received: Buffer;
  busy: boolean;
}

export async function openLoad(url: string, workload: InstrWorkload, connections: number): Promise<Load> {
  const { hostname: host, port } = new URL(url);
  const head = `POST ${ROUTE} HTTP/1.1\r\nHost: ${host}:${port}\r\nContent-Type: ${CONTENT_TYPE}\r\nContent-Length: ${Buffer.byteLength(BODY)}\r\n`;
  let replayIndex = 0;
  const requestText = () => {
    const key = workload === 'new-key' ? freshKey() : replayKeys[replayIndex++ % replayKeys.length]!;
    return `${head}Idempotency-Key: ${key}\r\n\r\n${BODY}`;
  };

  let closing = false;
  let reconnects = 0;
  /** The window in progress: requests still to send, answers still to come, and how it ends. */
  let toSend = 0;
  let toAnswer = 0;
  let done: (() => void) | undefined;
  let failed: ((error: Error) => void) | undefined;

  const sendNext = (conn: Connection) => {
    if (toSend === 0) return;
    toSend--;
    conn.busy = true;
    conn.socket.write(requestText(), 'latin1');
  };

  const open = (): Promise<Connection> =>
    new Promise((resolve, reject) => {
      const socket = connect({ host, port: Number(port), noDelay: true });
      const conn: Connection = { socket, received: Buffer.alloc(0), busy: false };
      socket.once('connect', () => resolve(conn));
      socket.once('error', reject);
      attach(conn);
    });

  const attach = (conn: Connection) => {
    conn.socket.on('data', (chunk: Buffer) => {
      conn.received = conn.received.length === 0 ? chunk : Buffer.concat([conn.received, chunk]);
      const length = responseLength(conn.received);
      if (length < 0) return;
      const status = Number(conn.received.toString('latin1', 9, 12));
      conn.received = length === conn.received.length ? Buffer.alloc(0) : conn.received.subarray(length);
      if (status !== 201) {
        failed?.(new Error(`answered ${status}, expected 201`));
        return;
      }
      conn.busy = false;
      toAnswer--;
      if (toAnswer === 0) done?.();
      else sendNext(conn);
    });
    conn.socket.on('close', () => {
      if (closing) return;
      if (conn.busy) {
        failed?.(new Error('the server closed a connection with a request in flight'));
        return;
      }
      // Idle too long for the server (a keep-alive timeout during a slow control step): reopen it.
      reconnects++;
      reopening.add(
        open().then((fresh) => {
          pool[pool.indexOf(conn)] = fresh;
        }),
      );
    });
    conn.socket.on('error', () => {
      // 'close' follows and decides
    });
  };

  const pool: Connection[] = [];
  const reopening = new Set<Promise<void>>();
  for (let i = 0; i < connections; i++) pool.push(await open());

  return {
    get reconnects() {
      return reconnects;
    },
    async run(amount) {
      await Promise.all(reopening);
      reopening.clear();
      return new Promise<void>((resolve, reject) => {
        toSend = amount;
        toAnswer = amount;
        done = () => {
          done = failed = undefined;
          resolve();
        };
        failed = (error) => {
          done = failed = undefined;
          toSend = 0;
          reject(error);
        };
        for (const conn of pool) sendNext(conn);
      });
    },
    close() {
      closing = true;
      for (const conn of pool) conn.socket.destroy();
    },
  };
}

/**
 * One request on a connection of its own, closed by the answer (`Connection: close`): the sanity
 * checks before the warm-up. fetch's keep-alive connection would stay open until the server's
 * keep-alive timeout (72 s on Fastify) and close in the middle of the counted windows, and a
 * connection closing deoptimizes node:http's stream code (see above).
 */
export function requestOnce(url: string, key: string): Promise<{ status: number; id: string | undefined }> {
  const { hostname: host, port } = new URL(url);
  const text =
    `POST ${ROUTE} HTTP/1.1\r\nHost: ${host}:${port}\r\nConnection: close\r\nContent-Type: ${CONTENT_TYPE}\r\n` +
    `Content-Length: ${Buffer.byteLength(BODY)}\r\nIdempotency-Key: ${key}\r\n\r\n${BODY}`;
  return new Promise((resolve, reject) => {
    // Written, not ended: node:http (httpAllowHalfOpen off) answers a half-close by ending the
    // socket at once, so an answer that waits on Redis was cut off. `Connection: close` ends it.
    const socket = connect({ host, port: Number(port) }, () => socket.write(text, 'latin1'));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const answer = Buffer.concat(chunks);
      const length = responseLength(answer);
      if (length < 0) return reject(new Error(`incomplete answer to ${key}`));
      const headerEnd = answer.indexOf('\r\n\r\n');
      let id: string | undefined;
      try {
        id = (JSON.parse(answer.toString('utf8', headerEnd + 4, length)) as { id?: string }).id;
      } catch {
        id = undefined;
      }
      resolve({ status: Number(answer.toString('latin1', 9, 12)), id });
    });
  });
}
