import type { CallHandler, ExecutionContext, NestInterceptor } from '@nestjs/common';
import type { Request, Response } from 'express';
import type { Observable } from 'rxjs';
import { catchError, of, throwError } from 'rxjs';
import type { IdempotencyEngine } from '../core/engine.js';
import type { IdempotencyContext } from '../core/engine.js';
import { MountedTwiceError } from '../core/errors.js';
import type { Exchange } from '../http/express-capture.js';
import { attach, captureResponse, isCaptured } from '../http/express-capture.js';
import { sendProblem, sendReplay } from '../http/node-response.js';
import { answerInstead } from './answer.js';
import type { NestRequest } from './reader.js';
import { nodeRequest, nodeResponse } from './reader.js';
import type { IdempotencyRoutes, ProtectedRoute } from './routes.js';

/**
 * Nest's mark on a request whose pipes refused it (ValidationPipe, ParseIntPipe…), so that its
 * handler never ran: a registered symbol, read without importing Nest's internals (absent before
 * Nest marks it, when such a refusal is stored like any answer).
 */
const REJECTED_BY_PIPES = Symbol.for('nestjs:rejected-by-pipes');

/** The context of each request a handler runs under, found from the request Nest hands out. */
const contexts = new WeakMap<object, IdempotencyContext>();

/** The idempotency context of a request `@Idempotent` protects; undefined when it passed through. */
export function contextOf(request: object): IdempotencyContext | undefined {
  return contexts.get(request);
}

/**
 * The engine's one decision, taken where Nest runs interceptors: after every middleware and guard
 * (so a refused request never claims its key) and before pipes and the handler. What the route
 * answers is captured on the Node response underneath either platform, whoever writes it (Nest's
 * reply, an exception filter, a `@Res()` handler, a piped `StreamableFile`), and stored before it
 * goes out; a replay or a problem is sent in place of Nest's reply (see `answerInstead`).
 */
export class IdempotencyInterceptor implements NestInterceptor {
  constructor(private readonly routes: IdempotencyRoutes) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> | Promise<Observable<unknown>> {
    if (context.getType() !== 'http') return next.handle();
    const route = this.routes.route(context.getHandler() as (...args: never[]) => unknown, context.getClass());
    if (route === undefined) return next.handle();
    const http = context.switchToHttp();
    const request = http.getRequest<NestRequest>();
    if (route.engine.passesAtOnce(request, route.reader)) return next.handle();
    return this.decide(route, request, http.getResponse<object>(), next);
  }

  private async decide(route: ProtectedRoute, request: NestRequest, response: object, next: CallHandler): Promise<Observable<unknown>> {
    const { engine, reader } = route;
    const res = nodeResponse(response);
    if (isCaptured(res)) {
      // Two layers on one request (idemkit/express's middleware and @Idempotent, or the module
      // imported twice) would claim twice.
      throw new MountedTwiceError(`idemkit: two idempotency layers handle ${request.method} ${reader.path(request)} (${route.name}); keep one`);
    }
    const decision = await engine.decide(request, reader);
    switch (decision.kind) {
      case 'pass':
        return next.handle();
      case 'replay':
        return this.answer(route, response, (out) => sendReplay(out, decision.response));
      case 'reject':
        return this.answer(route, response, (out) => sendProblem(out, decision.error, engine.options.problemTypeBase));
      case 'execute': {
        const { execution, body } = decision;
        const rawBody = body.readHere === true ? Buffer.from(body.body.buffer, body.body.byteOffset, body.body.byteLength) : undefined;
        const exchange: Exchange = { engine: engine as unknown as IdempotencyEngine<Request>, execution, rawBody, chunks: [], state: 'running' };
        attach(nodeRequest(request) as Request, res as Response, exchange);
        captureResponse(res as Response, execution);
        contexts.set(request, execution.context);
        return next.handle().pipe(
          catchError((error: unknown) => {
            // Refused by a pipe, the handler did not run: nothing happened, so the key is given
            // back (as for a guard's refusal) and the pipe's 400 goes out unstored.
            if ((request as { [REJECTED_BY_PIPES]?: boolean })[REJECTED_BY_PIPES] === true) execution.context.discard();
            // Otherwise the answer about to be written is an exception filter's answer to this error.
            else exchange.threw = true;
            return throwError(() => error);
          }),
        );
      }
    }
  }

  /** Answers without running the handler: in place of Nest's reply, or at once when the route answers itself. */
  private answer(route: ProtectedRoute, response: object, send: (res: ReturnType<typeof nodeResponse>) => void): Observable<unknown> {
    const res = nodeResponse(response);
    if (route.answersItself) send(res);
    else answerInstead(response, res, route.engine.representationHeaders, send);
    return of(undefined);
  }
}
