import type { IdempotencyContext } from '../core/engine.js';
import { IdempotencyEngine } from '../core/engine.js';
import type { IdempotencyOptions } from '../core/options.js';
import { toStoredResponse } from '../core/response.js';
import {
  asProblem,
  handlerErrorResponse,
  pathWithQuery,
  problemResponse,
  readLimited,
  rebuildResponse,
  replayResponse,
} from './fetch-common.js';

export type { IdempotencyContext } from '../core/engine.js';
export type { IdempotencyOptions } from '../core/options.js';

/**
 * A fetch-style handler. `ctx` is the idempotency context of a protected request, and undefined
 * for requests that pass through (uncovered methods, no key where none is required, fail-open).
 */
export type WebHandler<Tx = unknown> = (request: Request, ctx: IdempotencyContext<Tx> | undefined) => Response | Promise<Response>;

/**
 * Wraps a WHATWG `(request) => Response` handler (Hono, Next.js route handlers, Bun, Deno) with
 * the Idempotency-Key decision matrix.
 */
export function withIdempotency<Tx = unknown>(
  handler: WebHandler<Tx>,
  options: IdempotencyOptions<Request>,
): (request: Request) => Promise<Response> {
  const engine = new IdempotencyEngine<Request>(options);
  const { header, maxBodyBytes, replayHeaders } = engine.options;

  return async function idempotentHandler(request: Request): Promise<Response> {
    if (!engine.covers(request.method)) return handler(request, undefined);
    let key: string | undefined;
    let body: Uint8Array;
    try {
      key = engine.parseKey(request.headers.get(header));
      if (key === undefined) return handler(request, undefined);
      body = await readLimited(request, maxBodyBytes);
    } catch (error) {
      return asProblem(error);
    }
    // The handler gets the bytes read here. A request that came without a body stream has nothing
    // to put back; one that came with a body, even an empty one (Content-Length: 0), gets its bytes
    // back as they were: the fetch spec refuses `body: null` on a copy of a request whose body was read.
    const replayable = request.body === null ? request : new Request(request, { body: body as Uint8Array<ArrayBuffer> });
    const facts = { method: request.method, path: pathWithQuery(request.url), contentType: request.headers.get('content-type'), body };
    let admission;
    try {
      admission = await engine.admit(replayable, key, facts);
    } catch (error) {
      return asProblem(error);
    }
    switch (admission.kind) {
      case 'replay':
        return replayResponse(admission.response);
      case 'reject':
        return problemResponse(admission.error);
      case 'unprotected':
        return handler(replayable, undefined);
      case 'execute':
        break;
    }
    const { execution } = admission;
    let response: Response;
    let threw = false;
    let bytes: Uint8Array;
    try {
      response = await handler(replayable, execution.context as IdempotencyContext<Tx>);
      bytes = new Uint8Array(await response.arrayBuffer());
    } catch (error) {
      threw = true;
      engine.options.onError(error);
      response = handlerErrorResponse();
      bytes = new Uint8Array(await response.arrayBuffer());
    }
    const replacement = await execution.finish(toStoredResponse(response.status, response.headers, bytes, replayHeaders), threw);
    return replacement ? problemResponse(replacement) : rebuildResponse(response, bytes);
  };
}
