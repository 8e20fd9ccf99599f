import type { NextFunction, Request, Response } from 'express';
import type { IdempotencyContext, RequestReader } from '../core/engine.js';
import { IdempotencyEngine } from '../core/engine.js';
import { MountedTwiceError } from '../core/errors.js';
import type { IdempotencyOptions } from '../core/options.js';
import type { ExpressBody } from './express-body.js';
import { requestBody } from './express-body.js';
import { attach, captureResponse, isCaptured } from './express-capture.js';
import { headerValues } from './node-headers.js';
import { sendProblem, sendReplay } from './node-response.js';

export { problemErrorHandler } from './express-problem.js';
export type { ProblemErrorHandlerOptions } from './express-problem.js';
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

/** How the engine reads an Express request. */
const reader: RequestReader<Request, ExpressBody> = {
  method: (req) => req.method,
  header: headerValues,
  path: (req) => req.originalUrl,
  contentType: (req) => req.headers['content-type'],
  readBody: requestBody,
};

/**
 * Express middleware (Express 4 and 5) applying the Idempotency-Key decision matrix. Mount it after
 * authentication (its `scope` hook receives the Express request) and before or after the body parsers.
 */
export function idempotency(options: IdempotencyOptions<Request>) {
  const engine = new IdempotencyEngine<Request>(options);

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
        return sendProblem(res, decision.error);
      case 'execute': {
        const { execution, body } = decision;
        attach(req, res, { engine, execution, rawBody: body.readHere ? body.body : undefined, chunks: [], state: 'running' });
        captureResponse(res, execution);
        return next();
      }
    }
  }

  return function idempotencyMiddleware(req: Request, res: Response, next: NextFunction): void {
    if (engine.passesAtOnce(req, reader)) return next();
    if (isCaptured(res)) {
      // Two of these on one request (app-level and route-level, say) would claim twice.
      return next(new MountedTwiceError(`idemkit: two idempotency middlewares handle ${req.method} ${req.originalUrl}; mount one`));
    }
    // Express 4 ignores a middleware's promise, so a rejection must reach `next` by hand.
    decideAndRun(req, res, next).catch(next);
  };
}
