/**
 * `idemkit/lambda`: the Idempotency-Key decision matrix for AWS Lambda HTTP handlers (API Gateway
 * REST and HTTP APIs, Function URLs), and event sources through `idempotentRecords`. The middy
 * middleware is `idemkit/middy`. docs/lambda.md.
 */
import type { ContextFor } from '../core/execution.js';
import type { IdempotencyStore } from '../core/store.js';
import type { LambdaContext, LambdaHttpEvent, LambdaHttpResult } from './events.js';
import type { LambdaOptions } from './http.js';
import { answerOf, asResult, decideEvent, finishWith, handlerErrorResult, lambdaEngine } from './http.js';

export type { LambdaContext, LambdaHttpEvent, LambdaHttpResult } from './events.js';
export type { LambdaOptions } from './http.js';
export { eventKey, idempotentRecords } from './records.js';
export type { RecordsOptions } from './records.js';

/**
 * Wraps an API Gateway (REST or HTTP API) or Function URL handler with the Idempotency-Key
 * decision matrix: a replay answers the stored result with `Idempotent-Replayed: true`, a
 * conflict, a reused key or a bad one a problem+json result, and a new key runs `handler` once,
 * with `ctx` (undefined when the request passed through). A claim's lease never outlives the
 * invocation's `context.getRemainingTimeInMillis()` by more than `leaseMarginMs`.
 */
export function withIdempotency<Event extends LambdaHttpEvent, Context extends LambdaContext, Store extends IdempotencyStore, Transactional extends boolean = false>(
  handler: (event: Event, context: Context, ctx: ContextFor<Store, Transactional> | undefined) => LambdaHttpResult | Promise<LambdaHttpResult>,
  options: LambdaOptions<Store, Transactional, Event>,
): (event: Event, context: Context) => Promise<LambdaHttpResult> {
  const lambda = lambdaEngine(options as unknown as LambdaOptions<IdempotencyStore, boolean>, 'withIdempotency()');
  const { engine } = lambda;
  return async function idempotentHandler(event: Event, context: Context): Promise<LambdaHttpResult> {
    const { decision, end } = await decideEvent(lambda, event, context);
    try {
      if (decision.kind === 'pass') return await handler(event, context, undefined);
      if (decision.kind !== 'execute') return answerOf(engine, decision, event)!;
      const { execution } = decision;
      let result: LambdaHttpResult;
      let threw = false;
      try {
        result = asResult(await handler(event, context, execution.context as ContextFor<Store, Transactional>));
      } catch (error) {
        // Thrown out of a Lambda handler, an error is API Gateway's 502 and the retry would run
        // again: as on every adapter, it is a 500 answered and stored (in transactional mode
        // rolled back and released: nothing happened).
        engine.options.onError(error);
        threw = true;
        result = handlerErrorResult();
      }
      return await finishWith(engine, execution, event, result, threw);
    } finally {
      end();
    }
  };
}
