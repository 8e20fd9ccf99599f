import { Stream } from 'node:stream';
import { format } from 'node:util';
import type { ParameterizedContext } from 'koa';
import type { IdempotencyHttpError } from '../core/errors.js';
import { PROBLEM_CONTENT_TYPE } from '../core/errors.js';
import { isNullBodyStatus, replayBody, replayHeaderRecord } from '../core/response.js';
import type { StoredResponse } from '../core/store.js';

/**
 * The code that reads and writes a Koa response: a handler's answer made into bytes, a thrown
 * error made into Koa's answer to it, and the stored answers and problems the middleware sends.
 * The middleware flow is in koa.ts.
 *
 * Everything here works on `ctx`, at the middleware's place in the chain, never on the Node
 * response: Koa writes the response only after the whole chain has returned, and then writes
 * nothing (not even the body) when the client has gone, so what the client gets is fixed here,
 * on `ctx`, before the record is written.
 */

type Context = ParameterizedContext;

const EMPTY = Buffer.alloc(0);

/** What Koa's response keeps about a body set to null (`ctx.body = null`): answered empty. */
interface KoaResponseInternals {
  _explicitNullBody?: boolean;
}

/**
 * The bytes Koa would send for the body the chain below set, in the order Koa's `respond` tells
 * the cases apart (a null body, a Buffer, a string, a Blob, a stream, a fetch Response, anything
 * else as JSON). Streams are read to their end here: one that fails throws, and is answered as a
 * thrown error. The body is then set to these bytes (the status, message and media type kept), so
 * that what goes out is exactly what was stored.
 */
export async function settleBody(ctx: Context): Promise<Buffer> {
  const status = ctx.status;
  if (isNullBodyStatus(status)) {
    ctx.body = null; // what `respond` does: it also drops Content-Type and Content-Length
    return EMPTY;
  }
  const body: unknown = ctx.body;
  if (body === null || body === undefined) {
    if ((ctx.response as KoaResponseInternals)._explicitNullBody === true) {
      ctx.remove('Content-Type');
      ctx.remove('Transfer-Encoding');
      ctx.length = 0;
      return EMPTY;
    }
    // No body at all: Koa answers the status text (404 "Not Found" when nothing answered).
    const text = ctx.req.httpVersionMajor >= 2 ? String(status) : ctx.message || String(status);
    ctx.type = 'text';
    return pin(ctx, Buffer.from(text));
  }
  if (ctx.method === 'HEAD') return EMPTY; // Koa sends no body; what the body was does not matter
  if (Buffer.isBuffer(body)) return body;
  if (typeof body === 'string') return pin(ctx, Buffer.from(body));
  if (body instanceof Blob) return pin(ctx, Buffer.from(await body.arrayBuffer()));
  if (body instanceof ReadableStream || isNodeStream(body)) return pin(ctx, await readAll(body as AsyncIterable<unknown>));
  // A fetch Response: Koa applied its status and headers when it was set; its body is the answer.
  if (body instanceof Response) return pin(ctx, Buffer.from(await body.arrayBuffer()));
  return pin(ctx, Buffer.from(JSON.stringify(body)));
}

/** Sets the body to `bytes`, keeping what setting a body would change: the status, its message, the media type. */
function pin(ctx: Context, bytes: Buffer): Buffer {
  const { status, message } = ctx;
  const type = ctx.response.get('Content-Type');
  ctx.body = bytes;
  ctx.status = status;
  ctx.message = message;
  if (type === '') ctx.remove('Content-Type');
  else ctx.set('Content-Type', type);
  return bytes;
}

/** Koa's own test (lib/is-stream.js): a Node stream, or something that quacks like a readable one. */
function isNodeStream(value: unknown): boolean {
  if (value instanceof Stream) return true;
  if (value === null || typeof value !== 'object') return false;
  const v = value as Record<string, unknown>;
  return v.readable === true && typeof v.pipe === 'function' && typeof v.read === 'function' && typeof v.destroy === 'function';
}

async function readAll(stream: AsyncIterable<unknown>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) {
    if (typeof chunk === 'string') chunks.push(Buffer.from(chunk));
    else if (chunk instanceof Uint8Array) chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    else throw new TypeError('idemkit: a response body stream must yield strings, Buffers or Uint8Arrays');
  }
  return Buffer.concat(chunks);
}

interface ThrownFields {
  status?: unknown;
  statusCode?: unknown;
  expose?: unknown;
  headers?: unknown;
}

/**
 * Answers a thrown error on `ctx` the way Koa's own error handler (`ctx.onerror`) answers it, and
 * tells the app (`app.emit('error', error, ctx)`, where its logging listens) as Koa does: every
 * header the handler had set is dropped, the error's own `headers` are set, the status is its
 * `status` or `statusCode` (500 when Koa knows no such status), the body is `text/plain`, its
 * message when the error is marked `expose` (http-errors' 4xx) and the status text otherwise.
 * A thrown value that is not an Error is wrapped as Koa wraps it. Returns the body bytes.
 */
export function answerThrown(ctx: Context, thrown: unknown): Buffer {
  const isError = Object.prototype.toString.call(thrown) === '[object Error]' || thrown instanceof Error;
  const error = (isError ? thrown : new Error(format('non-error thrown: %j', thrown))) as Error & ThrownFields;
  ctx.app.emit('error', error, ctx);
  const { res } = ctx;
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  const headers = (typeof error.headers === 'object' && error.headers !== null ? error.headers : {}) as Record<string, string | string[]>;
  for (const name of Object.keys(headers)) {
    const lower = name.toLowerCase();
    if (lower !== 'content-type' && lower !== 'content-length') ctx.set(name, headers[name]!);
  }
  ctx.type = 'text';
  const given = error.status || error.statusCode;
  let status = typeof given === 'number' && Number.isInteger(given) && given >= 100 && given <= 999 ? given : 500;
  ctx.status = status;
  // Setting the status sets its text from Koa's own table: a status without one is answered 500.
  if (!ctx.message) ctx.status = status = 500;
  error.status = status;
  const bytes = Buffer.from(error.expose === true ? error.message : ctx.message);
  ctx.body = bytes;
  return bytes;
}

/** Sends a stored answer: its status, its replayed headers and its body, through the chain above. */
export function sendReplay(ctx: Context, stored: StoredResponse): void {
  ctx.status = stored.status;
  const body = replayBody(stored);
  if (isNullBodyStatus(stored.status)) ctx.body = null;
  else {
    ctx.body = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    // Koa gives a Buffer `application/octet-stream`; the stored answer says its own type, or none.
    ctx.remove('Content-Type');
  }
  for (const [name, value] of Object.entries(replayHeaderRecord(stored))) ctx.set(name, value);
}

/**
 * Sends an idempotency problem (RFC 9457); `typeBase` is the checked `problemTypeBase`. `drop`
 * names the headers of an answer it replaces (its representation), which must not go out with it.
 */
export function sendProblem(ctx: Context, error: IdempotencyHttpError, typeBase: string, drop: readonly string[] = []): void {
  for (const name of drop) ctx.remove(name);
  ctx.status = error.status;
  for (const [name, value] of Object.entries(error.headers)) ctx.set(name, value);
  ctx.body = Buffer.from(JSON.stringify(error.problem(typeBase)));
  ctx.set('Content-Type', PROBLEM_CONTENT_TYPE);
}
