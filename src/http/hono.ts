import type { Context, MiddlewareHandler, Next } from 'hono';
import type { HandlerTx, IdempotencyContext, RequestReader } from '../core/engine.js';
import type { IdempotencyStore, TxOf } from '../core/store.js';
import { BodyTooLargeError } from '../core/errors.js';
import { IdempotencyEngine } from '../core/engine.js';
import type { IdempotencyOptions } from '../core/options.js';
import type { FetchStyle } from './fetch-common.js';
import { readLimited } from '../core/bytes.js';
import { answerFetchStyle, pathWithQuery } from './fetch-common.js';

export type { ContextFor, IdempotencyContext } from '../core/engine.js';
export type { IdempotencyOptions } from '../core/options.js';

/** Context variables set by the middleware: `c.get('idempotency')`, undefined when the request passed through. */
export interface IdempotencyVariables<Tx = unknown, StoreTx = Tx> {
  idempotency: IdempotencyContext<Tx, StoreTx> | undefined;
}

/**
 * The variables the middleware sets for a store and a `transactional` setting, for an app that
 * mounts it with `app.use` and declares its variables up front:
 * `new Hono<{ Variables: IdempotencyVariablesFor<typeof store, true> }>()`. (A route that lists
 * the middleware itself, `app.post(path, idempotency(…), handler)`, needs nothing declared.)
 */
export type IdempotencyVariablesFor<Store, Transactional extends boolean = false> = IdempotencyVariables<HandlerTx<Store, Transactional>, TxOf<Store>>;

const reader: RequestReader<Context> = {
  method: (c) => c.req.method,
  header: (c, name) => c.req.raw.headers.get(name),
  path: (c) => pathWithQuery(c.req.url),
  contentType: (c) => c.req.header('content-type'),
  readBody: async (c, limit) => {
    if (c.req.raw.bodyUsed) {
      // An earlier middleware read the body through Hono's cache; take it from there.
      const cached = new Uint8Array(await c.req.arrayBuffer());
      if (cached.byteLength > limit) throw new BodyTooLargeError(limit);
      return { body: cached };
    }
    const body = await readLimited(c.req.raw, limit);
    // Put the bytes back for the handler. A request without a body stream has nothing to put back;
    // one with a body, even an empty one, gets its bytes (the fetch spec refuses `body: null` on a
    // copy of a request whose body was read).
    if (c.req.raw.body !== null) c.req.raw = new Request(c.req.raw, { body: body as Uint8Array<ArrayBuffer> });
    return { body };
  },
};

const style: FetchStyle<Context, Next, void> = {
  reader,
  pass: (_c, next) => next(),
  run: async (c, next, execution) => {
    c.set('idempotency', execution.context);
    await next();
    return c.res;
  },
  // Hono's compose turns a thrown Error into c.error plus the onError response.
  threw: (c) => c.error !== undefined,
  // After the handler, returning a response does not replace c.res: set it, cleared first so that
  // Hono does not merge the two responses' headers.
  answered: (c, response) => {
    c.res = undefined;
    c.res = response;
  },
};

/**
 * Hono middleware applying the Idempotency-Key decision matrix. The scope hook receives Hono's
 * `Context`, so it can read what an auth middleware before it has set.
 */
export function idempotency<Store extends IdempotencyStore, Transactional extends boolean = false>(
  options: IdempotencyOptions<Context, Store, Transactional>,
): MiddlewareHandler<{ Variables: IdempotencyVariablesFor<Store, Transactional> }> {
  const engine = new IdempotencyEngine<Context>(options);
  return function idempotencyMiddleware(c, next) {
    c.set('idempotency', undefined);
    return answerFetchStyle(engine, style, c, next);
  };
}
