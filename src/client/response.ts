import { PROBLEM_CONTENT_TYPE } from '../core/errors.js';
import { isNullBodyStatus, REPLAYED_HEADER } from '../core/response.js';
import type { InProgressInfo, Problem } from './errors.js';

/** How the call went, attached to the final response as `response.idempotency`. */
export interface IdempotencyInfo {
  /** The key every attempt carried; undefined when the request had none. */
  readonly key: string | undefined;
  /** Attempts sent, from 1. */
  readonly attempts: number;
  /** The server answered from its record (`Idempotent-Replayed: true`): the effect happened earlier. */
  readonly replayed: boolean;
  /**
   * Set only when the call settled on an in-progress 409: the original request with this key had
   * not finished when the client stopped (see `InProgressInfo`). Not a failure: ask again later
   * with the same key.
   */
  readonly inProgress?: InProgressInfo;
}


/** A fetch `Response` that also says how the idempotent call went. */
export type IdempotentResponse = Response & { readonly idempotency: IdempotencyInfo };


export function isReplayed(response: Response): boolean {
  const value = response.headers.get(REPLAYED_HEADER)?.trim().toLowerCase();
  return value === 'true' || value === '?1'; // Stripe's token, or a structured-field boolean
}

/** What an attempt got: the last response, its whole body, and where it came from. */
export interface ReadResponse {
  readonly response: Response;
  readonly body: Uint8Array<ArrayBuffer>;
  /** The URL that answered, after the redirects the client followed. */
  readonly url: string;
  readonly redirected: boolean;
}

/**
 * The response handed to the caller: a copy over the body already read during the attempt (so a
 * connection cut mid-body was retried rather than surfacing later), with a non-enumerable
 * `idempotency` property, and `url` and `redirected` as fetch would set them.
 */
export function finalResponse({ response: original, body, url, redirected }: ReadResponse, info: IdempotencyInfo): IdempotentResponse {
  const response = new Response(isNullBodyStatus(original.status) ? null : body, {
    status: original.status,
    statusText: original.statusText,
    headers: original.headers,
  });
  Object.defineProperties(response, {
    idempotency: { value: Object.freeze({ ...info }), enumerable: false },
    url: { value: url, enumerable: false },
    redirected: { value: redirected, enumerable: false },
  });
  return response as IdempotentResponse;
}

/** The parsed body of an `application/problem+json` response, or undefined. */
export function parseProblem(response: Response, body: Uint8Array): Problem | undefined {
  const type = response.headers.get('content-type')?.split(';')[0]?.trim().toLowerCase();
  if (type !== PROBLEM_CONTENT_TYPE) return undefined;
  try {
    const parsed: unknown = JSON.parse(new TextDecoder().decode(body));
    return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Problem) : undefined;
  } catch {
    return undefined; // a malformed problem is still an HTTP error; `response` keeps the raw body
  }
}
