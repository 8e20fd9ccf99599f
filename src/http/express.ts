import type { OutgoingHttpHeader, OutgoingHttpHeaders } from 'node:http';
import { IncomingMessage, ServerResponse } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import type { Execution, IdempotencyContext } from '../core/engine.js';
import { IdempotencyEngine } from '../core/engine.js';
import { BodyTooLargeError, IdemkitError, IdempotencyHttpError, PROBLEM_CONTENT_TYPE } from '../core/errors.js';
import { isJsonMediaType } from '../core/fingerprint.js';
import type { IdempotencyOptions } from '../core/options.js';
import { REPRESENTATION_HEADERS, isNullBodyStatus, replayBody, replayHeaderRecord, toStoredResponseFromRecord } from '../core/response.js';
import type { StoredResponse } from '../core/store.js';
import { headerValues } from './node-headers.js';

export type { IdempotencyContext } from '../core/engine.js';
export type { IdempotencyOptions } from '../core/options.js';

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace -- Express's own extension point for `req`.
  namespace Express {
    interface Request {
      /** The idempotency context of a protected request; undefined when the request passed through. */
      idempotency?: IdempotencyContext;
      /** The request body bytes, when the idempotency middleware read them. */
      rawBody?: Buffer;
    }
  }
}

/** Body-parser's private "already parsed" flag; setting it makes express.json() & co. skip the request. */
type ParsedRequest = Request & { _body?: boolean };

const EMPTY = Buffer.alloc(0);

/**
 * Express middleware (Express 4 and 5) applying the Idempotency-Key decision matrix. Mount it after
 * authentication (its `scope` hook receives the Express request) and before or after the body parsers.
 */
export function idempotency(options: IdempotencyOptions<Request>) {
  const engine = new IdempotencyEngine<Request>(options);
  const { header, maxBodyBytes } = engine.options;
  const headerName = header.toLowerCase();

  async function admitAndRun(req: Request, res: Response, next: NextFunction): Promise<void> {
    let key: string | undefined;
    let body: BodyFacts;
    const contentType = req.headers['content-type'];
    try {
      key = engine.parseKey(headerValues(req, headerName));
      if (key === undefined) return next();
      body = await requestBody(req as ParsedRequest, contentType, maxBodyBytes);
    } catch (error) {
      return sendProblemOr(error, res, next);
    }
    let admission;
    try {
      admission = await engine.admit(req, key, { method: req.method, path: req.originalUrl, contentType, body: body.body, parsedJson: body.parsedJson });
    } catch (error) {
      return sendProblemOr(error, res, next);
    }
    switch (admission.kind) {
      case 'replay':
        return sendReplay(res, admission.response);
      case 'reject':
        return sendProblem(res, admission.error);
      case 'unprotected':
        // Nothing to capture ('done'), but the handler still gets the body this middleware read.
        attach(req, res, { engine, execution: undefined, rawBody: body.readHere ? body.body : undefined, chunks: [], state: 'done' });
        return next();
      case 'execute':
        attach(req, res, { engine, execution: admission.execution, rawBody: body.readHere ? body.body : undefined, chunks: [], state: 'running' });
        captureResponse(res, admission.execution);
        return next();
    }
  }

  return function idempotencyMiddleware(req: Request, res: Response, next: NextFunction): void {
    if (!engine.covers(req.method)) return next();
    if (exchanges.has(res)) {
      // Two of these on one request (app-level and route-level, say) would claim twice.
      return next(new IdemkitError('ERR_IDEMKIT_MOUNTED_TWICE', `idemkit: two idempotency middlewares handle ${req.method} ${req.originalUrl}; mount one`));
    }
    // Express 4 ignores a middleware's promise, so a rejection must reach `next` by hand.
    admitAndRun(req, res, next).catch(next);
  };
}

type BodyFacts = {
  body: Buffer;
  parsedJson?: { value: unknown };
  /** True when the middleware read the stream itself: `body` is then what `req.rawBody` gives. */
  readHere?: boolean;
};

/**
 * The body to fingerprint. When a body parser ran first, its result stands in for the bytes;
 * otherwise the stream is read here and handed on as if a body parser had read it. A JSON body is
 * parsed once, for the route and for the fingerprint.
 */
async function requestBody(req: ParsedRequest, contentType: string | undefined, limit: number): Promise<BodyFacts> {
  const json = contentType !== undefined && isJsonMediaType(contentType);
  // `_body` is what body-parser sets; a stream that ended was read by something else.
  if (req._body === true || req.readableEnded || (req.complete && !req.readable)) {
    if (Buffer.isBuffer(req.rawBody)) return { body: checkLimit(req.rawBody, limit) };
    if (req.body === undefined) throw new Error('idemkit: the request body was read before the idempotency middleware and not kept');
    // Without the bytes, a parsed JSON number has lost the digits a double cannot hold: keep
    // them with express.json({ verify }) setting req.rawBody (docs/semantics.md, "The fingerprint").
    if (json) return { body: EMPTY, parsedJson: { value: req.body } };
    const parsed: unknown = req.body;
    if (Buffer.isBuffer(parsed) || typeof parsed === 'string') return { body: checkLimit(Buffer.isBuffer(parsed) ? parsed : Buffer.from(parsed), limit) };
    // Something else (express.urlencoded()'s object, say): the fingerprint encodes the value.
    return { body: EMPTY, parsedJson: { value: parsed } };
  }
  const raw = await readLimited(req, limit);
  if (raw.byteLength === 0) return { body: raw, readHere: true };
  const parsed = parseBody(raw, contentType, json);
  req.body = parsed;
  return json ? { body: raw, parsedJson: { value: parsed }, readHere: true } : { body: raw, readHere: true };
}

function checkLimit(bytes: Buffer, limit: number): Buffer {
  if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
  return bytes;
}

function parseBody(raw: Buffer, contentType: string | undefined, json: boolean): unknown {
  if (json) {
    try {
      return JSON.parse(raw.toString('utf8'));
    } catch (cause) {
      // What express.json() would have answered: a 400 through the error handlers, before any claim.
      throw Object.assign(new SyntaxError('idemkit: the JSON request body does not parse', { cause }), {
        status: 400,
        statusCode: 400,
        expose: true,
        type: 'entity.parse.failed',
      });
    }
  }
  return contentType?.toLowerCase().startsWith('text/') ? raw.toString('utf8') : raw;
}

function readLimited(req: IncomingMessage, limit: number): Promise<Buffer> {
  if (Number(req.headers['content-length'] ?? NaN) > limit) return Promise.reject(new BodyTooLargeError(limit));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    // Settles once: an over-limit chunk settles, and the 'data' or 'close' events after it must
    // not settle again.
    const settle = (error: Error | undefined) => {
      if (settled) return;
      settled = true;
      req.off('data', onData).off('end', onEnd).off('error', settle).off('close', onClose);
      if (error) reject(error);
      else resolve(Buffer.concat(chunks, size));
    };
    // Past the limit the rest of the upload is left to flow away unbuffered; Node drains it.
    const onData = (chunk: Buffer) => {
      if (settled) return;
      size += chunk.byteLength;
      if (size > limit) settle(new BodyTooLargeError(limit));
      else chunks.push(chunk);
    };
    const onEnd = () => settle(undefined);
    const onClose = () => settle(new Error('idemkit: the client aborted the request before its body was read'));
    req.on('data', onData).on('end', onEnd).on('error', settle).on('close', onClose);
  });
}

/**
 * What the middleware keeps for one request that reaches the handler, found from its response (a
 * WeakMap, not properties on req/res: see `requestAccessors`).
 */
interface Exchange {
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
}

interface Head {
  readonly status: number;
  readonly headers: OutgoingHttpHeaders;
}

const METHODS = ['writeHead', 'write', 'end', 'flushHeaders'] as const;
type Method = (...args: unknown[]) => unknown;
type Methods = Readonly<Record<(typeof METHODS)[number], Method>>;

const exchanges = new WeakMap<ServerResponse, Exchange>();

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
 * changed prototype is slow to change: four own properties per request cost ~10 µs. So the
 * interceptors are installed once on a prototype, the place Express documents for extending
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
function captureResponse(res: Response, execution: Execution): void {
  const shared = methodsOnPrototype(res);
  // A wrapper installed on the response itself before us (compression mounted earlier), or a
  // response outside an Express app: interceptors of its own, around what is there.
  if (shared === undefined || res.end !== shared.end || res.write !== shared.write || res.writeHead !== shared.writeHead || res.flushHeaders !== shared.flushHeaders) {
    const own = capturingMethods({ writeHead: res.writeHead, write: res.write, end: res.end, flushHeaders: res.flushHeaders } as Methods);
    for (const name of METHODS) (res as unknown as Record<string, Method>)[name] = own[name];
  }
  execution.watchResponse(res);
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
 * costs a new hidden class (~1 µs, and garbage for the collector: three properties took 0.04 µs
 * on a plain IncomingMessage and 3.8 µs on one after Object.setPrototypeOf, in a microbenchmark).
 * So these are getters on the bottom Express request prototype (`express.request`, below every
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
function attach(req: Request, res: Response, exchange: Exchange): void {
  exchanges.set(res, exchange);
  if (req.res === res && requestAccessors(req)) return;
  req.idempotency = exchange.execution?.context;
  if (exchange.rawBody === undefined) return;
  req.rawBody = exchange.rawBody;
  (req as ParsedRequest)._body = true;
}

/** Writes the record, then sends what the handler answered (or the engine's replacement). */
async function deliver(res: ServerResponse, exchange: Exchange, execution: Execution, callback: (() => void) | undefined): Promise<void> {
  const { statusCode: status, statusMessage } = res;
  const headers = res.getHeaders();
  const body = exchange.chunks.length === 1 ? exchange.chunks[0]! : Buffer.concat(exchange.chunks);
  // Express sends a thrown error to its error handlers, out of our sight: `threw` stays false.
  // That costs nothing in practice: Stripe semantics store 500s anyway, and in transactional
  // mode Execution.finish treats any 5xx as a failure and rolls back.
  const stored = toStoredResponseFromRecord(status, headers, body, exchange.engine.options.replayHeaders);
  let replacement: IdempotencyHttpError | undefined;
  try {
    replacement = await execution.finish(stored, false);
  } catch (error) {
    exchange.engine.options.onError(error);
    exchange.state = 'done';
    res.destroy(error as Error);
    return;
  }
  exchange.state = 'done';
  if (replacement) {
    // What describes the handler's representation goes; the rest (CORS, say) stays, as on Fastify.
    for (const name of exchange.engine.options.replayHeaders) res.removeHeader(name);
    for (const name of REPRESENTATION_HEADERS) res.removeHeader(name);
    return sendProblem(res, replacement);
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

function sendReplay(res: ServerResponse, stored: StoredResponse): void {
  res.statusCode = stored.status;
  for (const [name, value] of Object.entries(replayHeaderRecord(stored))) res.setHeader(name, value);
  const body = replayBody(stored);
  if (isNullBodyStatus(stored.status) || body.byteLength === 0) res.end();
  else res.end(body);
}

function sendProblem(res: ServerResponse, error: IdempotencyHttpError): void {
  res.statusCode = error.status;
  for (const [name, value] of Object.entries(error.headers)) res.setHeader(name, value);
  res.setHeader('content-type', PROBLEM_CONTENT_TYPE);
  res.end(JSON.stringify(error.problem()));
}

function sendProblemOr(error: unknown, res: ServerResponse, next: NextFunction): void {
  if (error instanceof IdempotencyHttpError) sendProblem(res, error);
  else next(error);
}
