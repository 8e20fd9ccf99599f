import { STATUS_CODES } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import { IdempotencyHttpError, PROBLEM_CONTENT_TYPE, RequestAbortedError } from '../core/errors.js';
import { optionReader } from '../core/option-reader.js';
import { sendProblem } from './node-response.js';

export interface ProblemErrorHandlerOptions {
  /**
   * Told about every error answered 5xx (a handler that threw, a misconfiguration): the client
   * gets a generic 500 problem without the error's message or stack, so the error must be logged
   * here. Errors answered 4xx (a body that does not parse) are the client's and are not reported.
   * @default (error) => console.error(error)
   */
  readonly onError?: (error: unknown, req: Request) => void;
  /**
   * The base of the `type` of idemkit's problems, as the middleware's option of the same name:
   * give both the same value. An absolute URI ending in `/` or `#`, or a URN ending in `:`.
   * @default 'urn:idemkit:problem:'
   */
  readonly problemTypeBase?: string;
}

/** A body-parser error (express.json(), express.text(), …): the request was refused before any handler ran. */
const BODY_PARSER_DETAILS: Readonly<Record<string, string>> = {
  'entity.parse.failed': 'The request body could not be parsed as its Content-Type says.',
  'entity.too.large': 'The request body is larger than this endpoint accepts.',
  'entity.verify.failed': 'The request body was refused.',
  'encoding.unsupported': 'The request body has a Content-Encoding this endpoint does not accept.',
  'charset.unsupported': 'The request body has a charset this endpoint does not accept.',
  'parameters.too.many': 'The request body has too many parameters.',
  'request.aborted': 'The request was aborted before its body was read.',
  'request.size.invalid': 'The request body is not as long as its Content-Length says.',
};

/**
 * An Express error handler (mount it last, after the routes) that answers every error as
 * `application/problem+json` (RFC 9457) and never with a stack trace:
 *
 * - idemkit's request errors with their own problem (status, `type`, headers such as Retry-After);
 * - the body parsers' errors (a malformed JSON body: 400; a body over the parser's `limit`: 413;
 *   …) with their status and a fixed `detail`; when the request had claimed its key (a parser
 *   mounted after the idempotency middleware refused the body), the claim is discarded, since
 *   nothing ran: the key stays usable with a corrected body;
 * - any other error with a `status` (or `statusCode`) of 4xx, as http-errors describes it, with
 *   its message only when it is marked `expose`;
 * - everything else as a generic 500, reported to `onError`.
 *
 * The generic problems use `type: 'about:blank'` (RFC 9457 §4.2.1): their status says it all.
 */
export function problemErrorHandler(options: ProblemErrorHandlerOptions = {}) {
  const read = optionReader('problemErrorHandler()', options);
  const onError = read.function('onError', { default: (error: unknown) => console.error(error) });
  const problemTypeBase = read.problemTypeBase('problemTypeBase');
  read.done();
  // Four parameters: that is how Express tells an error handler from a middleware.
  return function problemErrorHandler(error: unknown, req: Request, res: Response, next: NextFunction): void {
    // Part of another answer already went out: only Express can end it (it closes the connection).
    if (res.headersSent) return next(error);
    if (error instanceof IdempotencyHttpError) {
      if (error.status >= 500) onError(error, req);
      return sendProblem(res, error, problemTypeBase);
    }
    const facts = errorFacts(error);
    const bodyType = facts.type !== undefined && Object.hasOwn(BODY_PARSER_DETAILS, facts.type) ? facts.type : undefined;
    // A body refused after the claim: nothing ran, so the key is given back rather than kept with this 4xx.
    if (bodyType !== undefined && facts.status < 500) req.idempotency?.discard();
    if (facts.status >= 500) onError(error, req);
    const detail = bodyType !== undefined ? BODY_PARSER_DETAILS[bodyType] : facts.detail;
    const problem: GenericProblem = { type: 'about:blank', title: STATUS_CODES[facts.status] ?? 'Error', status: facts.status, ...(detail !== undefined ? { detail } : {}) };
    res.status(facts.status).set('content-type', PROBLEM_CONTENT_TYPE).end(JSON.stringify(problem));
  };
}

/** A problem that says no more than its status (RFC 9457 §4.2.1); `detail` only when the client may read it. */
interface GenericProblem {
  readonly type: 'about:blank';
  readonly title: string;
  readonly status: number;
  readonly detail?: string;
}

interface ErrorFacts {
  readonly status: number;
  /** body-parser's (and raw-body's) error `type`. */
  readonly type: string | undefined;
  /** What the client may read: the message of an error marked `expose` (http-errors' convention for 4xx). */
  readonly detail: string | undefined;
}

function errorFacts(error: unknown): ErrorFacts {
  // The client went away while its body was read: a 400 as body-parser answers it, nobody's bug.
  if (error instanceof RequestAbortedError) return { status: 400, type: 'request.aborted', detail: undefined };
  if (typeof error !== 'object' || error === null) return { status: 500, type: undefined, detail: undefined };
  const fields = error as { status?: unknown; statusCode?: unknown; type?: unknown; expose?: unknown; message?: unknown };
  const given = fields.status ?? fields.statusCode;
  const status = typeof given === 'number' && Number.isInteger(given) && given >= 400 && given <= 599 ? given : 500;
  const type = typeof fields.type === 'string' ? fields.type : undefined;
  const detail = status < 500 && fields.expose === true && typeof fields.message === 'string' ? fields.message : undefined;
  return { status, type, detail };
}
