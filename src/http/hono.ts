import type { Context, MiddlewareHandler, Next } from 'hono';
import type { EngineOverrides, HandlerTx, IdempotencyContext, RequestReader } from '../core/engine.js';
import type { IdempotencyStore, TxOf } from '../core/store.js';
import { BodyTooLargeError, MountedTwiceError } from '../core/errors.js';
import { IdempotencyEngine } from '../core/engine.js';
import type { IdempotencyOptions } from '../core/options.js';
import type { RouteNaming } from '../core/route-options.js';
import { readRouteOverrides, routeEngine } from '../core/route-options.js';
import type { FetchStyle } from './fetch-common.js';
import { readLimited } from '../core/bytes.js';
import { answerFetchStyle, pathWithQuery } from './fetch-common.js';

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

/**
 * A route's own settings, given to `middleware.route(…)`: the options that change how one request
 * is claimed and answered, each overriding the middleware's. Checked when `route` is called.
 */
export type IdempotencyRouteOptions = EngineOverrides<Context>;

/** How `route(…)`'s options are named in errors; the middleware-wide ones are refused there. */
const ROUTE: RouteNaming = { path: 'route()', mount: 'the middleware', mountHint: 'give it to idempotency(…)' };

/** The requests an idempotency middleware took: two on one request would claim twice. */
const taken = new WeakSet<Context>();

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
 * `Context`, so it can read what an auth middleware before it has set. Its `route(overrides)` is
 * the same middleware for one route with its own options (lease, in-flight policy, scope,
 * required…), checked when it is called: `app.post('/exports', idem.route({ leaseMs: 120_000 }), handler)`.
 * Mount one or the other on a request, not both: a request two of them see is refused
 * (`MountedTwiceError`).
 */
export function idempotency<Store extends IdempotencyStore, Transactional extends boolean = false>(
  options: IdempotencyOptions<Context, Store, Transactional>,
): MiddlewareHandler<{ Variables: IdempotencyVariablesFor<Store, Transactional> }> & {
  route(overrides?: IdempotencyRouteOptions): MiddlewareHandler<{ Variables: IdempotencyVariablesFor<Store, Transactional> }>;
} {
  const engine = new IdempotencyEngine<Context>(options);
  // Derived once, when `route(…)` is called, so that no request pays for the route's options.
  const route = (overrides?: IdempotencyRouteOptions) => middlewareFor(routeEngine(engine, readRouteOverrides(overrides, ROUTE), ROUTE));
  return Object.assign(middlewareFor(engine), { route });
}

function middlewareFor(engine: IdempotencyEngine<Context>): MiddlewareHandler {
  return function idempotencyMiddleware(c, next) {
    if (taken.has(c)) {
      // A request passed at once is none of this middleware's business; one it would claim would be claimed twice.
      if (engine.passesAtOnce(c, reader)) return next();
      throw new MountedTwiceError(`idemkit: two idempotency middlewares handle ${c.req.method} ${pathWithQuery(c.req.url)}; mount one (give a route its own options with middleware.route(…))`);
    }
    c.set('idempotency', undefined);
    if (engine.passesAtOnce(c, reader)) return next();
    taken.add(c);
    return answerFetchStyle(engine, style, c, next);
  };
}
