import type { ContextFor, IdempotencyContext, RequestBody, RequestReader } from '../core/engine.js';
import type { IdempotencyStore } from '../core/store.js';
import { IdempotencyEngine } from '../core/engine.js';
import type { IdempotencyOptions } from '../core/options.js';
import type { FetchStyle } from './fetch-common.js';
import { readLimited } from '../core/bytes.js';
import { answerFetchStyle, pathWithQuery } from './fetch-common.js';

/**
 * A fetch-style handler. `ctx` is the idempotency context of a protected request, and undefined
 * for requests that pass through (uncovered methods, no key where none is required, fail-open).
 */
export type WebHandler<Tx = unknown, StoreTx = Tx> = (request: Request, ctx: IdempotencyContext<Tx, StoreTx> | undefined) => Response | Promise<Response>;

const reader: RequestReader<Request> = {
  method: (request) => request.method,
  header: (request, name) => request.headers.get(name),
  path: (request) => pathWithQuery(request.url),
  contentType: (request) => request.headers.get('content-type'),
  readBody: async (request, limit): Promise<RequestBody<Request>> => {
    const body = await readLimited(request, limit);
    // The scope hook and the handler get the bytes read here. A request that came without a body
    // stream has nothing to put back; one with a body, even an empty one, gets its bytes back as
    // they were: the fetch spec refuses `body: null` on a copy of a request whose body was read.
    return request.body === null ? { body } : { body, request: new Request(request, { body: body as Uint8Array<ArrayBuffer> }) };
  },
};

/**
 * Wraps a WHATWG `(request) => Response` handler (Hono, Next.js route handlers, Bun, Deno) with
 * the Idempotency-Key decision matrix. `ctx.tx` takes its type from `options.store` and
 * `options.transactional`.
 */
export function withIdempotency<Store extends IdempotencyStore, Transactional extends boolean = false>(
  handler: (request: Request, ctx: ContextFor<Store, Transactional> | undefined) => Response | Promise<Response>,
  options: IdempotencyOptions<Request, Store, Transactional>,
): (request: Request) => Promise<Response> {
  const engine = new IdempotencyEngine<Request>(options);
  const style: FetchStyle<Request, undefined, Response> = {
    reader,
    pass: (request) => handler(request, undefined),
    run: (request, _next, execution) => handler(request, execution.context as ContextFor<Store, Transactional>),
  };
  return function idempotentHandler(request: Request): Promise<Response> {
    return answerFetchStyle(engine, style, request, undefined);
  };
}
