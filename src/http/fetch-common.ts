import { BodyTooLargeError, IdempotencyHttpError, PROBLEM_CONTENT_TYPE } from '../core/errors.js';
import { concatBytes, readStreamLimited } from '../core/bytes.js';
import { isNullBodyStatus, replayBody, replayHeaderList } from '../core/response.js';
import type { StoredResponse } from '../core/store.js';

/** A problem+json response for an idempotency error. */
export function problemResponse(error: IdempotencyHttpError): Response {
  return new Response(JSON.stringify(error.problem()), {
    status: error.status,
    headers: { ...error.headers, 'content-type': PROBLEM_CONTENT_TYPE },
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

/** Reads a request body up to `limit` bytes; throws `BodyTooLargeError` past it without reading on. */
export async function readLimited(request: Request, limit: number): Promise<Uint8Array> {
  const declared = Number(request.headers.get('content-length') ?? NaN);
  if (declared > limit) throw new BodyTooLargeError(limit);
  if (!request.body) return new Uint8Array(0);
  const read = await readStreamLimited(request.body, limit);
  if (read.over) throw new BodyTooLargeError(limit);
  return concatBytes(read.chunks, read.size);
}

/** Path with query string, as the fingerprint expects it. */
export function pathWithQuery(url: string): string {
  const parsed = new URL(url);
  return parsed.pathname + parsed.search;
}

/** Maps an idempotency error to its problem response; anything else is rethrown. */
export function asProblem(error: unknown): Response {
  if (error instanceof IdempotencyHttpError) return problemResponse(error);
  throw error;
}
