import type { Context, MiddlewareHandler } from 'hono';
import type { IdempotencyContext } from '../core/engine.js';
import { BodyTooLargeError } from '../core/errors.js';
import { IdempotencyEngine } from '../core/engine.js';
import type { IdempotencyOptions } from '../core/options.js';
import { toStoredResponse } from '../core/response.js';
import { asProblem, handlerErrorResponse, pathWithQuery, problemResponse, readLimited, rebuildResponse, replayResponse } from './fetch-common.js';

export type { IdempotencyContext } from '../core/engine.js';
export type { IdempotencyOptions } from '../core/options.js';

/** Context variables set by the middleware: `c.get('idempotency')`, undefined when the request passed through. */
export interface IdempotencyVariables<Tx = unknown> {
  idempotency: IdempotencyContext<Tx> | undefined;
}

/**
 * Hono middleware applying the Idempotency-Key decision matrix. The scope hook receives Hono's
 * `Context`, so it can read what an auth middleware before it has set.
 */
export function idempotency<Tx = unknown>(
  options: IdempotencyOptions<Context>,
): MiddlewareHandler<{ Variables: IdempotencyVariables<Tx> }> {
  const engine = new IdempotencyEngine<Context>(options);
  const { header, maxBodyBytes, replayHeaders } = engine.options;

  return async function idempotencyMiddleware(c, next) {
    c.set('idempotency', undefined);
    if (!engine.covers(c.req.method)) return next();
    let key: string | undefined;
    let body: Uint8Array;
    try {
      key = engine.parseKey(c.req.raw.headers.get(header));
      if (key === undefined) return next();
      body = await readBody(c, maxBodyBytes);
    } catch (error) {
      return asProblem(error);
    }
    const facts = { method: c.req.method, path: pathWithQuery(c.req.url), contentType: c.req.header('content-type'), body };
    let admission;
    try {
      admission = await engine.admit(c, key, facts);
    } catch (error) {
      return asProblem(error);
    }
    switch (admission.kind) {
      case 'replay':
        return replayResponse(admission.response);
      case 'reject':
        return problemResponse(admission.error);
      case 'unprotected':
        return next();
      case 'execute':
        break;
    }
    const { execution } = admission;
    c.set('idempotency', execution.context as IdempotencyContext<Tx>);
    let response: Response;
    let bytes: Uint8Array;
    let threw: boolean;
    try {
      await next();
      response = c.res;
      bytes = new Uint8Array(await response.arrayBuffer());
      // Hono's compose turns a thrown Error into c.error plus the onError response.
      threw = c.error !== undefined;
    } catch (error) {
      // What Hono does not route to its error handler arrives here, after the handler started: a
      // thrown value that is not an Error (a string, undefined, {}), an error handler that threw,
      // or a body stream that failed while it was read. Releasing the claim would let the retry run
      // the handler again; like the web adapter, answer a 500 and store it (in transactional mode
      // `threw` rolls back and releases, as for an Error).
      engine.options.onError(error);
      threw = true;
      response = handlerErrorResponse();
      bytes = new Uint8Array(await response.arrayBuffer());
    }
    const stored = toStoredResponse(response.status, response.headers, bytes, replayHeaders);
    const replacement = await execution.finish(stored, threw);
    c.res = undefined;
    c.res = replacement ? problemResponse(replacement) : rebuildResponse(response, bytes);
  };
}

async function readBody(c: Context, limit: number): Promise<Uint8Array> {
  if (c.req.raw.bodyUsed) {
    // An earlier middleware read the body through Hono's cache; take it from there.
    const cached = new Uint8Array(await c.req.arrayBuffer());
    if (cached.byteLength > limit) throw new BodyTooLargeError(limit);
    return cached;
  }
  const body = await readLimited(c.req.raw, limit);
  // Put the bytes back for the handler. A request without a body stream has nothing to put back;
  // one with a body, even an empty one, gets its bytes (the fetch spec refuses `body: null` on a
  // copy of a request whose body was read).
  if (c.req.raw.body !== null) c.req.raw = new Request(c.req.raw, { body: body as Uint8Array<ArrayBuffer> });
  return body;
}
