import type { Execution, IdempotencyEngine, RequestBody, RequestReader } from '../core/engine.js';
import type { IdempotencyHttpError } from '../core/errors.js';
import { PROBLEM_CONTENT_TYPE } from '../core/errors.js';
import { isNullBodyStatus, replayBody, replayHeaderList } from '../core/response.js';
import type { StoredResponse } from '../core/store.js';

/**
 * How a fetch-style framework (answers are WHATWG `Response`s) runs its handler; written once per
 * adapter. `Req` is what the scope hook receives, `Next` what the framework gives the adapter to
 * go on with (Hono's `next`), `Passed` what passing through returns.
 */
export interface FetchStyle<Req, Next, Passed> {
  readonly reader: RequestReader<Req>;
  /** Runs the handler unprotected; `request` is the one to hand on (its body may have been read). */
  pass(request: Req, next: Next): Passed | Promise<Passed>;
  /** Runs the handler under `execution` and returns its response. */
  run(request: Req, next: Next, execution: Execution): Response | Promise<Response>;
  /** Whether the response `run` returned is the framework's answer to a thrown error. */
  threw?(request: Req): boolean;
  /** Puts the stored answer (or the problem replacing it) in place, where returning it is not enough. */
  answered?(request: Req, response: Response): void;
}

/**
 * The fetch-style sequence: the engine decides; a replay or a problem is answered here; otherwise
 * the handler runs, unprotected or under its execution, whose answer is stored before it is
 * returned. Unexpected errors from the engine (a scope hook that threw) reject.
 */
export async function answerFetchStyle<Req, Next, Passed>(
  engine: IdempotencyEngine<Req>,
  style: FetchStyle<Req, Next, Passed>,
  request: Req,
  next: Next,
): Promise<Response | Passed> {
  const decision = await engine.decide(request, style.reader);
  switch (decision.kind) {
    case 'pass':
      return style.pass(handedOn(request, decision.body), next);
    case 'replay':
      return replayResponse(decision.response);
    case 'reject':
      return problemResponse(decision.error, engine.options.problemTypeBase);
    case 'execute':
      break;
  }
  const { execution } = decision;
  let response: Response;
  let bytes: Uint8Array;
  let threw: boolean;
  try {
    response = await style.run(handedOn(request, decision.body), next, execution);
    bytes = new Uint8Array(await response.arrayBuffer());
    threw = style.threw?.(request) ?? false;
  } catch (error) {
    // What the framework did not turn into an answer (a thrown value that is not an Error on Hono,
    // an error handler that threw, a body stream that failed while it was read). Releasing the claim
    // would let the retry run the handler again: a 500 is answered and stored (in transactional mode
    // `threw` rolls back and releases, as for an Error).
    engine.options.onError(error);
    threw = true;
    response = handlerErrorResponse();
    bytes = new Uint8Array(await response.arrayBuffer());
  }
  const replacement = await execution.finish(response.status, response.headers, bytes, threw);
  const answer = replacement ? problemResponse(replacement, engine.options.problemTypeBase) : rebuildResponse(response, bytes);
  style.answered?.(request, answer);
  return answer;
}

function handedOn<Req>(request: Req, body: RequestBody<Req> | undefined): Req {
  return body?.request ?? request;
}

/** A problem+json response for an idempotency error; `typeBase` is the checked `problemTypeBase`. */
export function problemResponse(error: IdempotencyHttpError, typeBase: string): Response {
  return new Response(JSON.stringify(error.problem(typeBase)), {
    status: error.status,
    headers: Object.assign({}, error.headers, { 'content-type': PROBLEM_CONTENT_TYPE }),
  });
}

/** The 500 answer stored and sent when a fetch-style handler throws. */
export function handlerErrorResponse(): Response {
  const problem = { type: 'about:blank', title: 'Internal Server Error', status: 500, detail: 'The handler failed.' };
  return new Response(JSON.stringify(problem), { status: 500, headers: { 'content-type': PROBLEM_CONTENT_TYPE } });
}

export function replayResponse(stored: StoredResponse): Response {
  const body = replayBody(stored);
  return new Response(isNullBodyStatus(stored.status) || body.byteLength === 0 ? null : (body as Uint8Array<ArrayBuffer>), {
    status: stored.status,
    headers: replayHeaderList(stored) as Array<[string, string]>,
  });
}

/** A copy of `response` with its already-read body, to send after the record is written. */
export function rebuildResponse(response: Response, body: Uint8Array): Response {
  return new Response(isNullBodyStatus(response.status) || body.byteLength === 0 ? null : (body as Uint8Array<ArrayBuffer>), {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}

/** Path with query string, as the fingerprint expects it. */
export function pathWithQuery(url: string): string {
  const parsed = new URL(url);
  return parsed.pathname + parsed.search;
}
