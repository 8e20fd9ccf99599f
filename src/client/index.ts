export { createIdempotentFetch } from './fetch.js';
export type { IdempotentFetch } from './fetch.js';
export type { IdempotentFetchOptions, RetryContext } from './options.js';
export type { IdempotentRequestInit } from './request.js';
export type { IdempotencyInfo, IdempotentResponse } from './response.js';
export { createRetryBudget } from './budget.js';
export type { RetryBudget, RetryBudgetOptions } from './budget.js';
export {
  AttemptTimeoutError,
  BodyNotReplayableError,
  CrossOriginRedirectError,
  HttpStatusError,
  IdempotentCallError,
  RequestFailedError,
  ResponseTooLargeError,
  RetryBudgetExhaustedError,
  TooManyRedirectsError,
} from './errors.js';
export type { CallInfo, Problem } from './errors.js';
export { IdemkitError, InvalidOptionError, InvalidKeyError } from '../core/errors.js';
