/**
 * Real HTTP servers on 127.0.0.1 that inject faults for the client tests. Nothing is mocked: the
 * client under test talks to these over TCP with Node's own fetch.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { withIdempotency } from '../../src/http/web.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import type { MemoryStore } from '../../src/stores/memory/index.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import type { IdempotencyLogger } from '../../src/core/logger.js';
import type { TestApp } from '../http/harness.js';
import { listenServer } from '../http/apps/listen.js';

/** One request as the server received it. */
export interface Seen {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: Buffer;
  /** performance.now() when the request (with its body) had arrived. */
  readonly at: number;
  /** Date.now() at the same moment, to compare with an HTTP-date. */
  readonly wall: number;
}

/** What the scripted server does with a request. */
export type Action =
  | { readonly status: number; readonly headers?: Record<string, string>; readonly body?: string }
  /** Close the connection without answering. */
  | 'drop'
  /** Reset the connection (TCP RST): the client sees ECONNRESET. */
  | 'reset'
  /** Send the headers and part of the body, then close the connection. */
  | 'drop-mid-body'
  /** Never answer. */
  | 'hang';

export interface ScriptedServer extends TestApp {
  readonly seen: Seen[];
}

/** A server that answers the n-th request (from 0) with `script(n, request)`. */
export async function scriptedServer(script: (n: number, seen: Seen) => Action): Promise<ScriptedServer> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    void receive(req).then((request) => {
      seen.push(request);
      act(script(seen.length - 1, request), req, res);
    });
  });
  return { ...(await listenServer(server)), seen };
}

/** One request as `scriptedFetch` received it; `at` is performance.now(), which fake timers move. */
export interface Sent {
  readonly headers: Headers;
  readonly at: number;
}

/**
 * The scripted server's answers without a socket, as the client's `fetch` option: for tests on
 * fake timers, where a real connection would wait on timers nobody advances. Only responses
 * (status, headers, body); answered at once, so no time passes in an attempt.
 */
export function scriptedFetch(script: (n: number) => Exclude<Action, string>): { readonly fetch: typeof globalThis.fetch; readonly sent: Sent[] } {
  const sent: Sent[] = [];
  const fetch = ((_input: RequestInfo | URL, init?: RequestInit) => {
    sent.push({ headers: new Headers(init?.headers), at: performance.now() });
    const action = script(sent.length - 1);
    const body = action.body ?? JSON.stringify({ status: action.status });
    return Promise.resolve(new Response(body, { status: action.status, headers: { 'content-type': 'application/json', ...action.headers } }));
  }) as typeof globalThis.fetch;
  return { fetch, sent };
}

function act(action: Action, req: IncomingMessage, res: ServerResponse): void {
  if (action === 'hang') return;
  if (action === 'drop') return void req.socket.destroy();
  if (action === 'reset') return void req.socket.resetAndDestroy();
  if (action === 'drop-mid-body') {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
    res.write('{"partial":', () => setTimeout(() => req.socket.destroy(), 10));
    return;
  }
  res.writeHead(action.status, { 'content-type': 'application/json', ...action.headers });
  res.end(action.body ?? JSON.stringify({ status: action.status }));
}

async function receive(req: IncomingMessage): Promise<Seen> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks), at: performance.now(), wall: Date.now() };
}

export interface IdempotentServer extends TestApp {
  readonly seen: Seen[];
  /** How many times the handler's effect ran. */
  readonly effects: () => number;
  readonly store: MemoryStore;
}

/**
 * A node:http server running the foundation middleware (`withIdempotency` + memory store) in
 * front of a handler with a counted effect. For the first `dropFirst` requests of each key, the
 * middleware and handler run to completion and then the connection is destroyed before the
 * response is written: the server executed the request, the client never heard back.
 */
export async function idempotentServer(options: {
  dropFirst?: number;
  leaseMs?: number;
  /** Makes the handler throw on its first run (a 500 the middleware stores and replays). */
  throwFirst?: boolean;
  /** Awaited by the handler before it answers: the test says when a running handler may finish. */
  hold?: () => Promise<void>;
  /** The middleware's retry hint for a 409 (its own default, 1 s, when not given). */
  retryAfterMs?: number;
  /** Called with each answer's status and the request it answers, just before it is written. */
  onAnswer?: (status: number, request: Seen) => void;
  /** Another store than the memory store (a real database); `store` is then still the unused memory store. */
  backend?: IdempotencyStore;
  logger?: IdempotencyLogger;
} = {}): Promise<IdempotentServer> {
  const seen: Seen[] = [];
  const perKey = new Map<string, number>();
  let effects = 0;
  const store = memoryStore({ sweepIntervalMs: 0 });
  const handler = withIdempotency(async (request) => {
    effects++;
    if (options.throwFirst && effects === 1) throw new Error('boom');
    await options.hold?.();
    return Response.json({ charge: effects, body: await request.text() }, { status: 201 });
  }, {
    store: options.backend ?? store,
    leaseMs: options.leaseMs ?? 30_000,
    ...(options.retryAfterMs !== undefined ? { retryAfterMs: options.retryAfterMs } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  });

  const server = createServer((req, res) => {
    void (async () => {
      const request = await receive(req);
      seen.push(request);
      const key = String(request.headers['idempotency-key'] ?? '');
      const n = (perKey.get(key) ?? 0) + 1;
      perKey.set(key, n);
      const response = await handler(toWebRequest(req, request));
      const body = Buffer.from(await response.arrayBuffer());
      if (n <= (options.dropFirst ?? 0)) return void req.socket.destroy();
      options.onAnswer?.(response.status, request);
      res.writeHead(response.status, Object.fromEntries(response.headers));
      res.end(body);
    })();
  });
  return { ...(await listenServer(server)), seen, effects: () => effects, store };
}

function toWebRequest(req: IncomingMessage, seen: Seen): Request {
  const headers = new Headers();
  for (const [name, values] of Object.entries(req.headersDistinct)) for (const value of values ?? []) headers.append(name, value);
  const hasBody = seen.method !== 'GET' && seen.method !== 'HEAD';
  return new Request(`http://${req.headers.host}${seen.url}`, { method: seen.method, headers, body: hasBody ? new Uint8Array(seen.body) : null });
}

/** A URL on a loopback port nothing listens on: every connection is refused. */
export async function deadUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}`;
}

export interface StreamingServer extends TestApp {
  /** Requests received. */
  readonly requests: () => number;
  /** Body bytes the sockets accepted (each write's callback fired), over all requests. */
  readonly written: () => number;
  /**
   * Resolves when the last response ended: `client` when the client closed the connection
   * first, `cap` when the server reached its safety cap and ended the body itself.
   */
  readonly ended: () => Promise<'client' | 'cap'>;
}

/**
 * A server whose answer to every request is a body that does not end: 64 KiB chunks written as
 * fast as the socket takes them, until the client hangs up. A safety cap (64 MiB by default) ends
 * it, so that a client without a limit fails its test instead of filling the machine's memory.
 * `length` makes it a body of exactly that many bytes, declared in Content-Length. `first`
 * answers the first `first` requests with a small 201 instead (a target that answers normally,
 * then grows).
 */
export async function streamingServer(options: { length?: number; first?: number } = {}): Promise<StreamingServer> {
  const cap = options.length ?? 64 * 1024 * 1024;
  const chunk = Buffer.alloc(64 * 1024, 'x');
  let requests = 0;
  let written = 0;
  let ended: Promise<'client' | 'cap'> = Promise.resolve('cap');
  const server = createServer((req, res) => {
    requests++;
    req.resume();
    if (requests <= (options.first ?? 0)) {
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: requests }));
      return;
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream', ...(options.length !== undefined ? { 'content-length': String(cap) } : {}) });
    let sent = 0;
    ended = new Promise((resolve) => {
      const pump = (): void => {
        if (res.destroyed) return;
        if (sent >= cap) {
          res.end();
          return resolve('cap');
        }
        const part = chunk.subarray(0, Math.min(chunk.length, cap - sent));
        sent += part.length;
        res.write(part, (error) => {
          if (error) return;
          written += part.length;
          pump();
        });
      };
      res.once('close', () => {
        if (!res.writableFinished) resolve('client');
      });
      pump();
    });
  });
  return { ...(await listenServer(server)), requests: () => requests, written: () => written, ended: () => ended };
}
