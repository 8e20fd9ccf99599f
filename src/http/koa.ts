import type { Next, ParameterizedContext } from 'koa';
import type { ContextFor, EngineOverrides, Execution, RequestReader } from '../core/engine.js';
import type { RegisteredContext } from '../core/index.js';
import type { IdempotencyStore } from '../core/store.js';
import { IdempotencyEngine } from '../core/engine.js';
import { MountedTwiceError, RequestAbortedError } from '../core/errors.js';
import type { IdempotencyOptions } from '../core/options.js';
import type { RouteNaming } from '../core/route-options.js';
import { readRouteOverrides, routeEngine } from '../core/route-options.js';
import type { KoaBody } from './koa-body.js';
import { requestBody } from './koa-body.js';
import { answerThrown, sendProblem, sendReplay, settleBody } from './koa-response.js';
import { headerValues } from './node-headers.js';
import { watchResponse } from './node-response.js';

export type { KoaRequestBody } from './koa-body.js';

declare module 'koa' {
  interface DefaultState {
    /**
     * The idempotency context of a protected request; absent when the request passed through.
     * Its `tx` is typed by the store registered through idemkit's `Register` (`unknown` until
     * then); the middleware's own `context(ctx)` needs no registration.
     */
    idempotency?: RegisteredContext;
  }
}

/** The Koa context as the middleware and its `scope` hook receive it. */
export type KoaContext = ParameterizedContext;

/**
 * A route's own settings, given to `middleware.route(…)`: the options that change how one request
 * is claimed and answered, each overriding the middleware's. Checked when `route` is called.
 */
export type IdempotencyRouteOptions = EngineOverrides<KoaContext>;

/** The middleware, with a typed reader of the context it gives each request and per-route copies. */
export interface IdempotencyMiddleware<Context> {
  (ctx: KoaContext, next: Next): Promise<void>;
  /**
   * The idempotency context of a request this middleware protects (undefined when it passed
   * through), with `tx` typed by the store and `transactional` option the middleware was given.
   */
  context(ctx: KoaContext): Context | undefined;
  /**
   * The same middleware for one route with its own `overrides` (lease, in-flight policy, scope,
   * required…), to list on that route: `router.post('/exports', idem.route({ leaseMs: 120_000 }), handler)`.
   * Checked now, naming the option. Mount one or the other on a request, not both: a request two
   * of them see is refused (`MountedTwiceError`).
   */
  route(overrides?: IdempotencyRouteOptions): IdempotencyMiddleware<Context>;
}

/** How the engine reads a Koa request. */
const reader: RequestReader<KoaContext, KoaBody> = {
  method: (ctx) => ctx.method,
  header: (ctx, name) => headerValues(ctx.req, name),
  // As received (with the query), whatever a router or a mount made of `ctx.path`.
  path: (ctx) => ctx.originalUrl,
  contentType: (ctx) => ctx.req.headers['content-type'],
  readBody: requestBody,
};

/** How `route(…)`'s options are named in errors; the middleware-wide ones are refused there. */
const ROUTE: RouteNaming = { path: 'route()', mount: 'the middleware', mountHint: 'give it to idempotency(…)' };

/** The requests an idempotency middleware took: two on one request would claim twice. */
const taken = new WeakSet<KoaContext>();

/**
 * Koa middleware (Koa 3) applying the Idempotency-Key decision matrix. Mount it after
 * authentication (its `scope` hook receives the Koa context) and before the routes, or list it
 * (or its `route(…)`) on the routes it protects.
 *
 * What is stored is what the client gets: the status, headers and body the chain below answered,
 * made into bytes here and sent as those bytes. An error thrown below is answered here, as Koa's
 * own error handler answers it (and told to `app.on('error')`), so that this answer is what is
 * stored and replayed: error-handling middleware mounted before this one does not see it.
 */
export function idempotency<Store extends IdempotencyStore, Transactional extends boolean = false>(
  options: IdempotencyOptions<KoaContext, Store, Transactional>,
): IdempotencyMiddleware<ContextFor<Store, Transactional>> {
  return middlewareFor<ContextFor<Store, Transactional>>(new IdempotencyEngine<KoaContext>(options));
}

function middlewareFor<Context>(engine: IdempotencyEngine<KoaContext>): IdempotencyMiddleware<Context> {
  const { problemTypeBase } = engine.options;

  async function idempotencyMiddleware(ctx: KoaContext, next: Next): Promise<void> {
    if (engine.passesAtOnce(ctx, reader)) return void (await next());
    if (taken.has(ctx)) {
      throw new MountedTwiceError(`idemkit: two idempotency middlewares handle ${ctx.method} ${ctx.originalUrl}; mount one (give a route its own options with middleware.route(…))`);
    }
    taken.add(ctx);
    let decision;
    try {
      decision = await engine.decide(ctx, reader);
    } catch (error) {
      // The client left before its body was read: nothing was claimed, and nobody is left to
      // answer (a 400, as body parsers answer it, rather than a 500 told to app.on('error')).
      if (error instanceof RequestAbortedError) return void (ctx.status = 400);
      // A scope hook that threw, or a JSON body that does not parse (400): Koa answers the error.
      throw error;
    }
    switch (decision.kind) {
      case 'pass':
        return void (await next());
      case 'replay':
        return sendReplay(ctx, decision.response);
      case 'reject':
        return sendProblem(ctx, decision.error, problemTypeBase);
      case 'execute':
        return execute(ctx, next, decision.execution);
    }
  }

  /** Runs the chain below under `execution`, stores its answer, and leaves that answer on `ctx`. */
  async function execute(ctx: KoaContext, next: Next, execution: Execution): Promise<void> {
    ctx.state.idempotency = execution.context as RegisteredContext;
    // An answer written on the Node response by hand (`ctx.respond = false`) never comes back
    // here: the lease keeper sees it finished and releases the claim. A client that hangs up is
    // not a reason: the claim is kept for as long as the handler runs.
    watchResponse(execution, ctx.res);
    let threw = false;
    let bytes: Buffer;
    try {
      await next();
      if (ctx.respond === false || ctx.headerSent) return await execution.abort();
      bytes = await settleBody(ctx);
    } catch (error) {
      // Part of an answer already went out: only Koa can end it (it closes the connection).
      if (ctx.headerSent) {
        await execution.abort();
        throw error;
      }
      threw = true;
      bytes = answerThrown(ctx, error);
    }
    const replacement = await execution.finish(ctx.status, ctx.response.headers, bytes, threw);
    if (replacement) sendProblem(ctx, replacement, problemTypeBase, engine.representationHeaders);
  }

  // Derived once, when `route(…)` is called, so that no request pays for the route's options.
  function route(overrides?: IdempotencyRouteOptions): IdempotencyMiddleware<Context> {
    return middlewareFor<Context>(routeEngine(engine, readRouteOverrides(overrides, ROUTE), ROUTE));
  }

  return Object.assign(idempotencyMiddleware, {
    context: (ctx: KoaContext) => ctx.state.idempotency as Context | undefined,
    route,
  });
}
