/**
 * `idemkit/middy`: the Idempotency-Key decision matrix as a middy (6.x) middleware, on the same
 * engine and event mapping as `idemkit/lambda`'s `withIdempotency`. A subpath of its own so that
 * an application that wraps handlers without middy never reads middy's words in its imports, and
 * middy's users get one name to import. It needs nothing of `@middy/core` at run time: the
 * request it is given is declared structurally. docs/lambda.md.
 */
import type { ContextFor, Execution } from '../core/execution.js';
import type { IdempotencyStore } from '../core/store.js';
import type { LambdaContext, LambdaHttpEvent } from './events.js';
import type { LambdaOptions } from './http.js';
import { answerOf, asResult, decideEvent, finishWith, handlerErrorResult, lambdaEngine } from './http.js';

/** The part of middy's request the middleware reads and writes. */
interface MiddyRequest {
  readonly event: LambdaHttpEvent;
  readonly context: LambdaContext;
  response?: unknown;
  error?: unknown;
}

/** The middleware: pass it to `middy(handler).use(…)`; `context(lambdaContext)` gives the handler its ctx. */
export interface IdempotencyMiddleware<Context> {
  /** Decides; a replay or a problem returns early (the handler and later middlewares do not run). */
  before(request: MiddyRequest): Promise<unknown>;
  /** Stores the handler's result, or puts the problem that replaces it in its place. */
  after(request: MiddyRequest): Promise<void>;
  /** A throw of the handler (or of a middleware after it): the 500 (or an inner error middleware's answer) is stored. */
  onError(request: MiddyRequest): Promise<void>;
  /** The idempotency context of the invocation with this Lambda context; undefined when it passed through. */
  context(lambdaContext: object): Context | undefined;
}

interface Running {
  readonly execution: Execution;
  readonly end: () => void;
}

/**
 * A middy middleware applying the Idempotency-Key decision matrix to API Gateway (REST, HTTP
 * API) and Function URL events. Use it after authentication (its `scope` hook receives the event)
 * and before the body parsers: it fingerprints the body as API Gateway sent it. In the handler,
 * `middleware.context(context)` is the idempotency context (`ctx.tx` typed by the store).
 */
export function idempotency<Store extends IdempotencyStore, Transactional extends boolean = false, Event extends LambdaHttpEvent = LambdaHttpEvent>(
  options: LambdaOptions<Store, Transactional, Event>,
): IdempotencyMiddleware<ContextFor<Store, Transactional>> {
  const lambda = lambdaEngine(options as unknown as LambdaOptions<IdempotencyStore, boolean>, 'idempotency()');
  const { engine } = lambda;
  // Keyed by middy's request, and the Lambda context for the handler: both live for one invocation.
  const running = new WeakMap<object, Running>();
  const contexts = new WeakMap<object, ContextFor<Store, Transactional>>();

  async function finish(request: MiddyRequest, result: unknown, threw: boolean): Promise<void> {
    const run = running.get(request);
    if (run === undefined) return;
    running.delete(request);
    try {
      request.response = await finishWith(engine, run.execution, request.event, asResult(result), threw);
    } finally {
      run.end();
    }
  }

  return {
    async before(request) {
      const { decision, end } = await decideEvent(lambda, request.event, request.context);
      if (decision.kind !== 'execute') {
        end();
        // middy 6 ends the chain at the first before-middleware that returns a value.
        return answerOf(engine, decision, request.event);
      }
      running.set(request, { execution: decision.execution, end });
      contexts.set(request.context, decision.execution.context as ContextFor<Store, Transactional>);
      return undefined;
    },
    after: (request) => finish(request, request.response, false),
    async onError(request) {
      if (!running.has(request)) return;
      // An error middleware that runs before this one (used after it) may have answered already.
      if (request.response !== undefined && request.response !== null) return finish(request, request.response, true);
      engine.options.onError(request.error);
      return finish(request, handlerErrorResult(), true);
    },
    context: (lambdaContext) => contexts.get(lambdaContext),
  };
}
