import type { OutgoingHttpHeader, OutgoingHttpHeaders } from 'node:http';
import { IncomingMessage, ServerResponse } from 'node:http';
import type { Request, Response } from 'express';
import type { Execution, IdempotencyEngine } from '../core/engine.js';
import type { RegisteredContext } from '../core/index.js';
import { isNullBodyStatus } from '../core/response.js';
import type { ParsedRequest } from './express-body.js';
import { sendProblem, watchResponse } from './node-response.js';

/**
 * The code that touches Express's request and response objects: the response's writes are held
 * back while the handler runs (captured), and `req.idempotency`/`req.rawBody` are read from the
 * request's exchange. The middleware flow is in express.ts.
 */

/**
 * What the middleware keeps for one request that reaches the handler, found from its response (a
 * WeakMap, not properties on req/res: see `requestAccessors`).
 */
export interface Exchange {
  readonly engine: IdempotencyEngine<Request>;
  /** Undefined when the store was down and `failOpen` let the request through. */
  readonly execution: Execution | undefined;
  /** The body bytes, when the middleware read them itself (`req.rawBody`). */
  readonly rawBody: Buffer | undefined;
  readonly chunks: Buffer[];
  /** running: collecting; finishing: the record is being written; done: writes go to the socket. */
  state: 'running' | 'finishing' | 'done';
  /** The status and headers the held chunks were written under (see `heldUnder`). */
  head?: Head;
  /**
   * Set when the answer is the framework's answer to a thrown error (idemkit/nest sees the
   * handler's error pass its interceptor); Express's error handlers are out of the middleware's sight.
   */
  threw?: boolean;
}

interface Head {
  readonly status: number;
  readonly headers: OutgoingHttpHeaders;
}

const METHODS = ['writeHead', 'write', 'end', 'flushHeaders'] as const;
type Method = (...args: unknown[]) => unknown;
type Methods = Readonly<Record<(typeof METHODS)[number], Method>>;

const exchanges = new WeakMap<ServerResponse, Exchange>();

/** Whether an idempotency middleware already took this request (two would claim twice). */
export function isCaptured(res: ServerResponse): boolean {
  return exchanges.has(res);
}

/**
 * The interceptors, around `originals` (another middleware's wrappers, or the prototype's). A
 * response without a capture, or whose capture is done, goes straight to them, so nothing ever
 * needs to be restored.
 */
function capturingMethods(originals: Methods): Methods {
  return {
    writeHead(this: ServerResponse, ...args: unknown[]): unknown {
      const exchange = exchanges.get(this);
      if (exchange === undefined || exchange.state === 'done') return originals.writeHead.apply(this, args);
      const [status, ...rest] = args;
      this.statusCode = status as number;
      if (typeof rest[0] === 'string') this.statusMessage = rest.shift() as string;
      applyWriteHeadHeaders(this, rest[0] as OutgoingHttpHeaders | OutgoingHttpHeader[] | undefined);
      return this;
    },
    write(this: ServerResponse, ...args: unknown[]): unknown {
      const exchange = exchanges.get(this);
      if (exchange === undefined || exchange.state === 'done') return originals.write.apply(this, args);
      const [chunk, encoding, callback] = args;
      if (exchange.state === 'running') {
        const buffer = toBuffer(chunk, encoding);
        if (!heldUnder(this, exchange)) exchange.head = { status: this.statusCode, headers: this.getHeaders() };
        exchange.chunks.push(buffer);
      }
      const cb = typeof encoding === 'function' ? encoding : callback;
      if (typeof cb === 'function') process.nextTick(cb as () => void);
      return true;
    },
    end(this: ServerResponse, ...args: unknown[]): unknown {
      const exchange = exchanges.get(this);
      if (exchange === undefined || exchange.state === 'done') return originals.end.apply(this, args);
      let [chunk, encoding, callback] = args;
      if (typeof chunk === 'function') [chunk, callback] = [undefined, chunk];
      if (typeof encoding === 'function') [encoding, callback] = [undefined, encoding];
      const execution = exchange.execution;
      if (exchange.state !== 'running' || execution === undefined) return this;
      heldUnder(this, exchange);
      if (chunk !== undefined && chunk !== null) exchange.chunks.push(toBuffer(chunk, encoding));
      exchange.state = 'finishing';
      void deliver(this, exchange, execution, callback as (() => void) | undefined);
      return this;
    },
    flushHeaders(this: ServerResponse): void {
      const exchange = exchanges.get(this);
      if (exchange === undefined || exchange.state === 'done') originals.flushHeaders.call(this);
    },
  };
}

/**
 * Whether the chunks held so far still belong to the answer being written. On a plain Node response
 * the first write sends the status and headers, and nothing can change them afterwards (setHeader
 * throws ERR_HTTP_HEADERS_SENT; Express's error handler, seeing `headersSent`, destroys the
 * connection). Here nothing has been sent, so whoever changes the status or headers after a partial
 * body (Express's error handler after a throw, an error middleware's `res.status(500).json(…)`)
 * starts a new answer: the chunks written under the old head are dropped, so that the body sent and
 * stored is the new answer alone and matches the Content-Length it declares. Returns false when
 * nothing is held (or what was held was just dropped).
 */
function heldUnder(res: ServerResponse, exchange: Exchange): boolean {
  const head = exchange.head;
  if (head === undefined) return false;
  if (res.statusCode === head.status && sameHeaders(res.getHeaders(), head.headers)) return true;
  exchange.chunks.length = 0;
  exchange.head = undefined;
  return false;
}

/**
 * Express gives each response its app's prototype (`app.response`), and a response object that
 * changed prototype is slow to change (docs/performance.md). So the interceptors are installed once on a prototype, the place Express documents for extending
 * responses: the bottom Express one (`express.response`, whose prototype is Node's), which every
 * app's `app.response` inherits from, mounted sub-apps included. A sub-app swaps the prototype of
 * the requests passing through it, and an interceptor on one app's prototype only would miss an
 * answer sent after such a swap. Node's own ServerResponse.prototype is never touched.
 */
const prototypeMethods = new WeakMap<object, Methods>();

function methodsOnPrototype(res: ServerResponse): Methods | undefined {
  const proto = Object.getPrototypeOf(res) as object | null;
  if (proto === null) return undefined;
  let methods = prototypeMethods.get(proto);
  if (methods !== undefined) return methods;
  const base = expressBase(proto, ServerResponse.prototype);
  if (base === undefined) return undefined;
  methods = prototypeMethods.get(base);
  if (methods === undefined) {
    const target = base as unknown as Record<string, Method>;
    methods = capturingMethods({ writeHead: target.writeHead!, write: target.write!, end: target.end!, flushHeaders: target.flushHeaders! });
    for (const name of METHODS) Object.defineProperty(base, name, { value: methods[name], writable: true, configurable: true, enumerable: false });
    prototypeMethods.set(base, methods);
  }
  // An app prototype that overrides one of the methods itself would hide the interceptors.
  if (METHODS.some((name) => (proto as Record<string, unknown>)[name] !== methods[name])) return undefined;
  prototypeMethods.set(proto, methods);
  return methods;
}

/**
 * The bottom of an Express prototype chain: the prototype whose own prototype is Node's (`node`),
 * or undefined when `proto` is not below Node's class or the one to extend cannot be extended.
 */
function expressBase(proto: object, node: object): object | undefined {
  let current: object | null = proto;
  while (current !== null && current !== node) {
    const next = Object.getPrototypeOf(current) as object | null;
    if (next === node) return Object.isExtensible(current) ? current : undefined;
    current = next;
  }
  return undefined;
}

/**
 * Holds the handler's response back from the socket until the record is written, so a client never
 * sees an answer that a retry could not replay. Everything Express writes goes through
 * writeHead/write/end, whether from res.send, res.json, res.end or a piped stream.
 */
export function captureResponse(res: Response, execution: Execution): void {
  const shared = methodsOnPrototype(res);
  // A wrapper installed on the response itself before us (compression mounted earlier), or a
  // response outside an Express app: interceptors of its own, around what is there.
  if (shared === undefined || res.end !== shared.end || res.write !== shared.write || res.writeHead !== shared.writeHead || res.flushHeaders !== shared.flushHeaders) {
    const own = capturingMethods({ writeHead: res.writeHead, write: res.write, end: res.end, flushHeaders: res.flushHeaders } as Methods);
    for (const name of METHODS) (res as unknown as Record<string, Method>)[name] = own[name];
  }
  watchResponse(execution, res);
}

/**
 * `req.idempotency`, `req.rawBody` and `req._body` (body-parser's "already read" flag, which makes
 * express.json() & co. skip the request), read from the request's exchange.
 */
const REQUEST_ACCESSORS = {
  idempotency: (exchange: Exchange) => exchange.execution?.context,
  rawBody: (exchange: Exchange) => exchange.rawBody,
  _body: (exchange: Exchange) => (exchange.rawBody === undefined ? undefined : true),
} as const;
type AccessorName = keyof typeof REQUEST_ACCESSORS;
const ACCESSOR_NAMES = Object.keys(REQUEST_ACCESSORS) as AccessorName[];
const requestPrototypes = new WeakSet<object>();

/**
 * Express gives each request its app's prototype too, and on such an object every new own property
 * costs a new hidden class and garbage for the collector (docs/performance.md). So these are getters on the bottom Express request prototype (`express.request`, below every
 * app's `app.request`), reading the exchange found through `req.res`; assigning one (a `verify`
 * callback setting `req.rawBody`, say) still makes an ordinary own property. Outside an Express
 * app they are own properties.
 */
function requestAccessors(req: Request): boolean {
  const proto = Object.getPrototypeOf(req) as object | null;
  if (proto === null) return false;
  if (requestPrototypes.has(proto)) return true;
  // On the bottom Express prototype, for the same reason as the response interceptors.
  const base = expressBase(proto, IncomingMessage.prototype);
  if (base === undefined) return false;
  if (!requestPrototypes.has(base)) {
    if (ACCESSOR_NAMES.some((name) => name in base)) return false;
    for (const name of ACCESSOR_NAMES) {
      const read = REQUEST_ACCESSORS[name];
      Object.defineProperty(base, name, {
        configurable: true,
        enumerable: false,
        get(this: Request) {
          const exchange = this.res === undefined ? undefined : exchanges.get(this.res);
          return exchange === undefined ? undefined : read(exchange);
        },
        set(this: Request, value: unknown) {
          Object.defineProperty(this, name, { value, writable: true, enumerable: true, configurable: true });
        },
      });
    }
    requestPrototypes.add(base);
  }
  // An app prototype that defines one of the names itself hides the accessor.
  for (let current = proto; current !== base; current = Object.getPrototypeOf(current) as object) {
    if (ACCESSOR_NAMES.some((name) => Object.hasOwn(current, name))) return false;
  }
  requestPrototypes.add(proto);
  return true;
}

/** Records the exchange of a request that goes on to the handler, and makes it visible on `req`. */
export function attach(req: Request, res: Response, exchange: Exchange): void {
  exchanges.set(res, exchange);
  if (req.res === res && requestAccessors(req)) return;
  // Typed as the application registered its store (`Register`); the engine's is untyped.
  req.idempotency = exchange.execution?.context as RegisteredContext | undefined;
  if (exchange.rawBody === undefined) return;
  req.rawBody = exchange.rawBody;
  (req as ParsedRequest)._body = true;
}

/** Writes the record, then sends what the handler answered (or the engine's replacement). */
async function deliver(res: ServerResponse, exchange: Exchange, execution: Execution, callback: (() => void) | undefined): Promise<void> {
  const { statusCode: status, statusMessage } = res;
  const headers = res.getHeaders();
  const body = exchange.chunks.length === 1 ? exchange.chunks[0]! : Buffer.concat(exchange.chunks);
  // Express sends a thrown error to its error handlers, out of the middleware's sight: `threw`
  // stays false there. That costs nothing in practice: Stripe semantics store 500s anyway, and in
  // transactional mode Execution.finish treats any 5xx as a failure and rolls back.
  let replacement;
  try {
    replacement = await execution.finish(status, headers, body, exchange.threw === true);
  } catch (error) {
    exchange.engine.options.onError(error);
    exchange.state = 'done';
    res.destroy(error as Error);
    return;
  }
  exchange.state = 'done';
  if (replacement) {
    // What describes the handler's representation goes; the rest (CORS, say) stays, as on Fastify.
    for (const name of exchange.engine.representationHeaders) res.removeHeader(name);
    return sendProblem(res, replacement, exchange.engine.options.problemTypeBase);
  }
  // Code running after end (an error handler, say) must not alter what was stored.
  if (res.statusCode !== status || !sameHeaders(res.getHeaders(), headers)) {
    resetHeaders(res, headers);
    res.statusCode = status;
    res.statusMessage = statusMessage;
  }
  if (isNullBodyStatus(status) || body.byteLength === 0) res.end(callback);
  else res.end(body, callback);
}

function sameHeaders(now: OutgoingHttpHeaders, then: OutgoingHttpHeaders): boolean {
  let count = 0;
  for (const name in now) {
    if (now[name] !== then[name]) return false;
    count++;
  }
  for (const _name in then) count--;
  return count === 0;
}

/** Does what Node's writeHead does to the header list, without sending it. */
function applyWriteHeadHeaders(res: ServerResponse, headers: OutgoingHttpHeaders | OutgoingHttpHeader[] | undefined): void {
  if (Array.isArray(headers)) {
    // A flat [name, value, …] list may repeat a name (Link, Set-Cookie): each occurrence is kept.
    for (let i = 0; i < headers.length; i += 2) res.removeHeader(String(headers[i]));
    for (let i = 0; i < headers.length; i += 2) res.appendHeader(String(headers[i]), headers[i + 1] as string | string[]);
  } else if (headers) {
    for (const [name, value] of Object.entries(headers)) if (value !== undefined) res.setHeader(name, value);
  }
}

function resetHeaders(res: ServerResponse, headers: OutgoingHttpHeaders): void {
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) res.setHeader(name, value);
}

function toBuffer(chunk: unknown, encoding: unknown): Buffer {
  if (typeof chunk === 'string') return Buffer.from(chunk, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8');
  if (chunk instanceof Uint8Array) return Buffer.from(chunk); // a copy: callers may reuse their buffer
  throw new TypeError('idemkit: response chunks must be strings, Buffers or Uint8Arrays');
}
