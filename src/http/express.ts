import type { NextFunction, Request, Response } from 'express';
import type { ContextFor, EngineOverrides, RequestReader } from '../core/engine.js';
import type { RegisteredContext } from '../core/index.js';
import type { IdempotencyStore } from '../core/store.js';
import { IdempotencyEngine } from '../core/engine.js';
import { MountedTwiceError } from '../core/errors.js';
import type { IdempotencyOptions } from '../core/options.js';
import type { RouteNaming } from '../core/route-options.js';
import { readRouteOverrides, routeEngine } from '../core/route-options.js';
import type { ExpressBody } from './express-body.js';
import { requestBody } from './express-body.js';
import { attach, captureResponse, isCaptured } from './express-capture.js';
import { headerValues } from './node-headers.js';
import { sendProblem, sendReplay } from './node-response.js';

export { problemErrorHandler } from './express-problem.js';
export type { ProblemErrorHandlerOptions } from './express-problem.js';

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace -- Express's own extension point for `req`.
  namespace Express {
    interface Request {
      /**
       * The idempotency context of a protected request; undefined when the request passed through.
       * Its `tx` is typed by the store registered through `Register` (`unknown` until then); the
       * middleware's own `context(req)` needs no registration.
       */
      idempotency?: RegisteredContext;
      /** The request body bytes, when the idempotency middleware read them. */
      rawBody?: Buffer;
    }
  }
}

/** How the engine reads an Express request. */
const reader: RequestReader<Request, ExpressBody> = {
  method: (req) => req.method,
  header: headerValues,
  path: (req) => req.originalUrl,
  contentType: (req) => req.headers['content-type'],
  readBody: requestBody,
};

/**
 * A route's own settings, given to `middleware.route(…)`: the options that change how one request
 * is claimed and answered, each overriding the middleware's. Checked when `route` is called.
 */
export type IdempotencyRouteOptions = EngineOverrides<Request>;

/** The middleware, with a typed reader of the context it gives each request and per-route copies. */
export interface IdempotencyMiddleware<Context> {
  (req: Request, res: Response, next: NextFunction): void;
  /**
   * The idempotency context of a request this middleware protects (undefined when it passed
   * through), with `tx` typed by the store and `transactional` option the middleware was given.
   */
  context(req: Request): Context | undefined;
  /**
   * The same middleware for one route with its own `overrides` (lease, in-flight policy, scope,
   * required…), to list on that route: `app.post('/exports', idem.route({ leaseMs: 120_000 }), handler)`.
   * Checked now, naming the option. Mount one or the other on a request, not both: a request two
   * of them see is refused (`MountedTwiceError`).
   */
  route(overrides?: IdempotencyRouteOptions): IdempotencyMiddleware<Context>;
}

/** How `route(…)`'s options are named in errors; the middleware-wide ones are refused there. */
const ROUTE: RouteNaming = { path: 'route()', mount: 'the middleware', mountHint: 'give it to idempotency(…)' };

/**
 * Express middleware (Express 4 and 5) applying the Idempotency-Key decision matrix. Mount it after
 * authentication (its `scope` hook receives the Express request) and before or after the body parsers.
 */
export function idempotency<Store extends IdempotencyStore, Transactional extends boolean = false>(
  options: IdempotencyOptions<Request, Store, Transactional>,
): IdempotencyMiddleware<ContextFor<Store, Transactional>> {
  return middlewareFor<ContextFor<Store, Transactional>>(new IdempotencyEngine<Request>(options));
}

function middlewareFor<Context>(engine: IdempotencyEngine<Request>): IdempotencyMiddleware<Context> {

  async function decideAndRun(req: Request, res: Response, next: NextFunction): Promise<void> {
    const decision = await engine.decide(req, reader);
    switch (decision.kind) {
      case 'pass':
        if (!decision.failOpen) return next();
        // Nothing to capture ('done'), but the handler still gets the body this middleware read.
        attach(req, res, { engine, execution: undefined, rawBody: decision.body.readHere ? decision.body.body : undefined, chunks: [], state: 'done' });
        return next();
      case 'replay':
        return sendReplay(res, decision.response);
      case 'reject':
        return sendProblem(res, decision.error, engine.options.problemTypeBase);
      case 'execute': {
        const { execution, body } = decision;
        attach(req, res, { engine, execution, rawBody: body.readHere ? body.body : undefined, chunks: [], state: 'running' });
        captureResponse(res, execution);
        return next();
      }
    }
  }

  function idempotencyMiddleware(req: Request, res: Response, next: NextFunction): void {
    if (engine.passesAtOnce(req, reader)) return next();
    if (isCaptured(res)) {
      // Two of these on one request (app-level and route-level, say) would claim twice.
      return next(new MountedTwiceError(`idemkit: two idempotency middlewares handle ${req.method} ${req.originalUrl}; mount one (give a route its own options with middleware.route(…))`));
    }
    // Express 4 ignores a middleware's promise, so a rejection must reach `next` by hand.
    decideAndRun(req, res, next).catch(next);
  }

  // Derived once, when `route(…)` is called, so that no request pays for the route's options.
  function route(overrides?: IdempotencyRouteOptions): IdempotencyMiddleware<Context> {
    return middlewareFor<Context>(routeEngine(engine, readRouteOverrides(overrides, ROUTE), ROUTE));
  }

  return Object.assign(idempotencyMiddleware, {
    context: (req: Request) => req.idempotency as Context | undefined,
    route,
  });
}
