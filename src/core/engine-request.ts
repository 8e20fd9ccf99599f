// What the engine reads of a request (through an adapter's `RequestReader`) and what it answers
// (`Decision`): the types an adapter is written against, apart from the engine that uses them.
import type { IdempotencyHttpError } from './errors.js';
import type { FingerprintInput } from './fingerprint.js';
import type { StoredResponse } from './store.js';
import type { Execution } from './execution.js';

/** The request facts the engine needs, read by the adapter. */
export type RequestFacts = FingerprintInput;

/** A request body as an adapter read it (`RequestReader.readBody`). */
export interface RequestBody<Req = unknown> {
  /** The body bytes (empty when only a parsed value is left). */
  readonly body: Uint8Array;
  /** The parsed body, when the framework parsed it (see `FingerprintInput.parsedJson`). */
  readonly parsedJson?: { readonly value: unknown };
  /**
   * The request to use from here on, when reading the body replaced it (a fetch `Request`, whose
   * body can be read once): the scope hook and the handler get this one.
   */
  readonly request?: Req;
}

/**
 * How one framework's request is read: written once per adapter (or per route), not per request,
 * so that `decide` allocates nothing to learn about a request.
 */
export interface RequestReader<Req, Body extends RequestBody<Req> = RequestBody<Req>> {
  method(request: Req): string;
  /** Every occurrence of a request header; `name` is lower-case. */
  header(request: Req, name: string): readonly string[] | string | null | undefined;
  /** The path with its query string, as received. */
  path(request: Req): string;
  contentType(request: Req): string | null | undefined;
  /**
   * Reads the body, up to `limit` bytes: throws `BodyTooLargeError` past it (answered 413). Called
   * only for a request that carries a key. A plain value is used as it is, without waiting a turn.
   */
  readBody(request: Req, limit: number): Body | PromiseLike<Body>;
}

/**
 * The engine's one answer to a request, from `decide`. Errors the client caused or the store
 * reported arrive as `reject`, never thrown; only unexpected ones (a bug, a scope hook that threw
 * something else) reject the promise, and the adapter hands those to its framework.
 */
export type Decision<Req = unknown, Body extends RequestBody<Req> = RequestBody<Req>> =
  /**
   * Run the handler unprotected: the method is not covered, the request has no key and none is
   * required, or (`failOpen`) the store is down. After a fail-open the body was read: `body` is it.
   */
  | { readonly kind: 'pass'; readonly failOpen: false; readonly body: undefined }
  | { readonly kind: 'pass'; readonly failOpen: true; readonly body: Body }
  /** Send this stored answer (`replayHeaderList`/`replayHeaderRecord`, `replayBody`). */
  | { readonly kind: 'replay'; readonly response: StoredResponse }
  /** Send this problem (400 key, 413, 409, 422, 503, invalid scope…); nothing was claimed. */
  | { readonly kind: 'reject'; readonly error: IdempotencyHttpError }
  /** Run the handler under `execution`, then `execution.finish` with its answer. */
  | { readonly kind: 'execute'; readonly execution: Execution; readonly body: Body };
