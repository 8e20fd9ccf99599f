import type { ServerResponse } from 'node:http';
import type { Execution } from '../core/engine.js';
import type { IdempotencyHttpError } from '../core/errors.js';
import { PROBLEM_CONTENT_TYPE } from '../core/errors.js';
import { isNullBodyStatus, replayBody, replayHeaderRecord } from '../core/response.js';
import type { StoredResponse } from '../core/store.js';

/** What the lease keeper's check reads of a Node response. */
interface WatchedResponse {
  readonly writableFinished: boolean;
}

/** A Node response that finished while its execution still runs went out without `finish`. */
function answeredWithoutUs(response: WatchedResponse): boolean {
  return response.writableFinished;
}

/**
 * Lets the execution's lease-keeper ticks see a Node response that finished without passing the
 * adapter (a hijacked Fastify reply): its claim is then released. Checked per tick, not with a
 * listener per request (docs/performance.md).
 */
export function watchResponse(execution: Execution, response: WatchedResponse): void {
  execution.watch(response, answeredWithoutUs);
}

/** Sends a stored answer on a Node response. */
export function sendReplay(res: ServerResponse, stored: StoredResponse): void {
  res.statusCode = stored.status;
  for (const [name, value] of Object.entries(replayHeaderRecord(stored))) res.setHeader(name, value);
  const body = replayBody(stored);
  if (isNullBodyStatus(stored.status) || body.byteLength === 0) res.end();
  else res.end(body);
}

/** Sends an idempotency problem (RFC 9457) on a Node response; `typeBase` is the checked `problemTypeBase`. */
export function sendProblem(res: ServerResponse, error: IdempotencyHttpError, typeBase: string): void {
  res.statusCode = error.status;
  for (const [name, value] of Object.entries(error.headers)) res.setHeader(name, value);
  res.setHeader('content-type', PROBLEM_CONTENT_TYPE);
  res.end(JSON.stringify(error.problem(typeBase)));
}
