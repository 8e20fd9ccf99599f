// What the Lambda handler wrapper (index.ts) and the middy middleware (middy.ts) share: how an
// API Gateway or Function URL event is read, and how the engine's decision becomes a proxy result.
import { Buffer } from 'node:buffer';
import type { Decision, Execution, RequestBody, RequestReader } from '../core/engine.js';
import { IdempotencyEngine } from '../core/engine.js';
import type { IdempotencyHttpError } from '../core/errors.js';
import { BodyTooLargeError, PROBLEM_CONTENT_TYPE } from '../core/errors.js';
import type { IdempotencyOptions } from '../core/options.js';
import { isNullBodyStatus, replayBody, replayHeaderList } from '../core/response.js';
import type { IdempotencyStore, StoredResponse } from '../core/store.js';
import type { LambdaContext, LambdaHttpEvent, LambdaHttpResult } from './events.js';
import { isHttpApi } from './events.js';
import { InvocationLeases } from './leases.js';

/**
 * The options of `withIdempotency` and of the middy middleware: the engine's, and the lease margin.
 * `Event` is the handler's event type (`APIGatewayProxyEvent` of @types/aws-lambda, say): the
 * `scope` hook receives the event as it came.
 */
export type LambdaOptions<
  Store extends IdempotencyStore = IdempotencyStore,
  Transactional extends boolean = false,
  Event extends LambdaHttpEvent = LambdaHttpEvent,
> = IdempotencyOptions<Event, Store, Transactional> & {
  /**
   * How long a claim's lease may outlive the invocation's `context.getRemainingTimeInMillis()`:
   * a retry of an invocation that timed out takes the key over this long after the timeout.
   * @default 1000
   */
  readonly leaseMarginMs?: number;
};

/** The engine of one wrapped handler and the leases of its invocations. */
export interface LambdaEngine {
  readonly engine: IdempotencyEngine<LambdaHttpEvent>;
  readonly leases: InvocationLeases;
}

export function lambdaEngine(options: LambdaOptions<IdempotencyStore, boolean>, where: string): LambdaEngine {
  const { leaseMarginMs, ...engineOptions } = options;
  const leases = new InvocationLeases(leaseMarginMs, where);
  const store = engineOptions.store === undefined || engineOptions.store === null ? engineOptions.store : leases.wrap(engineOptions.store);
  return { engine: new IdempotencyEngine<LambdaHttpEvent>(Object.assign({}, engineOptions, { store })), leases };
}

/** The engine's decision on one event, with its claims' leases bounded by `context`; `end` once answered. */
export async function decideEvent(
  { engine, leases }: LambdaEngine,
  event: LambdaHttpEvent,
  context: LambdaContext | undefined,
): Promise<{ readonly decision: Decision<LambdaHttpEvent>; readonly end: () => void }> {
  const { result, invocation } = leases.run(context, () => engine.decide(event, reader));
  try {
    return { decision: await result, end: () => leases.end(invocation) };
  } catch (error) {
    leases.end(invocation);
    throw error;
  }
}

const reader: RequestReader<LambdaHttpEvent> = {
  method: (event) => (isHttpApi(event) ? event.requestContext.http.method : event.httpMethod),
  header: headerOf,
  path: (event) => {
    if (isHttpApi(event)) return event.rawQueryString ? `${event.rawPath}?${event.rawQueryString}` : event.rawPath;
    return event.path + restQuery(event);
  },
  contentType: (event) => {
    const values = headerOf(event, 'content-type');
    return typeof values === 'string' || values === undefined ? values : values[0];
  },
  readBody: (event, limit): RequestBody<LambdaHttpEvent> => ({ body: eventBody(event, limit) }),
};

/**
 * Every value of a header, its name in any case: REST events keep the client's spelling (and
 * every repeat in `multiValueHeaders`); HTTP API events lower-case names and join repeats with
 * commas, which the key parser reads as a repeated header.
 */
function headerOf(event: LambdaHttpEvent, name: string): string | readonly string[] | undefined {
  if (!isHttpApi(event) && event.multiValueHeaders) {
    const values: string[] = [];
    for (const [header, list] of Object.entries(event.multiValueHeaders)) if (list !== undefined && header.toLowerCase() === name) values.push(...list);
    if (values.length > 0) return values;
  }
  const headers = event.headers;
  if (!headers) return undefined;
  const exact = headers[name];
  if (exact !== undefined) return exact;
  for (const header in headers) if (header.toLowerCase() === name) return headers[header];
  return undefined;
}

/** A REST event's query string: API Gateway hands it over decoded, as parameters, in the order sent. */
function restQuery(event: Extract<LambdaHttpEvent, { httpMethod: string }>): string {
  const pairs: string[] = [];
  const multi = event.multiValueQueryStringParameters;
  if (multi) {
    for (const [name, values] of Object.entries(multi)) for (const value of values ?? []) pairs.push(`${encodeURIComponent(name)}=${encodeURIComponent(value)}`);
  } else if (event.queryStringParameters) {
    for (const [name, value] of Object.entries(event.queryStringParameters)) if (value !== undefined) pairs.push(`${encodeURIComponent(name)}=${encodeURIComponent(value)}`);
  }
  return pairs.length === 0 ? '' : `?${pairs.join('&')}`;
}

/** The body's bytes: base64 decoded when the gateway encoded it; 413 past `limit`. */
function eventBody(event: LambdaHttpEvent, limit: number): Uint8Array {
  const body = event.body;
  if (body === undefined || body === null || body === '') return new Uint8Array(0);
  const bytes = event.isBase64Encoded ? Buffer.from(body, 'base64') : Buffer.from(body, 'utf8');
  if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
  return bytes;
}

/**
 * A result as API Gateway reads one: an HTTP API takes any other value as a 200 JSON body
 * (a string as it is), and so does idemkit, for both payload versions.
 */
export function asResult(value: unknown): LambdaHttpResult {
  if (typeof value === 'object' && value !== null && typeof (value as LambdaHttpResult).statusCode === 'number') return value as LambdaHttpResult;
  return { statusCode: 200, headers: { 'content-type': 'application/json' }, body: typeof value === 'string' ? value : (JSON.stringify(value) ?? '') };
}

/**
 * Stores the handler's result under `execution` (`threw`: it answers a thrown error) and returns
 * what to send: the result itself, or the problem that replaces it (a lost lease, a rollback).
 */
export async function finishWith(engine: IdempotencyEngine<LambdaHttpEvent>, execution: Execution, event: LambdaHttpEvent, result: LambdaHttpResult, threw: boolean): Promise<LambdaHttpResult> {
  const replacement = await execution.finish(result.statusCode, resultHeaders(result), resultBody(result), threw);
  return replacement === undefined ? result : problemResult(replacement, engine.options.problemTypeBase, event);
}

function resultHeaders(result: LambdaHttpResult): Array<readonly [string, string]> {
  const entries: Array<readonly [string, string]> = [];
  const multi = result.multiValueHeaders;
  if (multi) for (const [name, values] of Object.entries(multi)) for (const value of values) entries.push([name, String(value)]);
  if (result.headers) {
    // API Gateway merges the two maps; a name in both is sent once, from multiValueHeaders.
    for (const [name, value] of Object.entries(result.headers)) if (multi?.[name] === undefined) entries.push([name, String(value)]);
  }
  return entries;
}

function resultBody(result: LambdaHttpResult): Uint8Array {
  if (result.body === undefined || result.body === null) return new Uint8Array(0);
  return result.isBase64Encoded ? Buffer.from(result.body, 'base64') : Buffer.from(result.body, 'utf8');
}

const TEXT_TYPE = /^(?:text\/|application\/(?:[\w.+-]*\+)?(?:json|xml|javascript|x-www-form-urlencoded)\b)/i;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Bytes as a result body: text when the type is textual and the bytes are UTF-8, else base64. */
function encodeBody(bytes: Uint8Array, contentType: string | undefined): { body: string; isBase64Encoded: boolean } {
  if (bytes.byteLength === 0) return { body: '', isBase64Encoded: false };
  if (contentType !== undefined && TEXT_TYPE.test(contentType)) {
    try {
      return { body: utf8.decode(bytes), isBase64Encoded: false };
    } catch {
      // Not UTF-8 after all: base64 keeps every byte.
    }
  }
  return { body: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64'), isBase64Encoded: true };
}

/**
 * A result with these headers and body, in the event's payload version: a repeated header goes
 * to `multiValueHeaders` on REST, and is joined with commas on an HTTP API (which has no other way).
 */
function resultOf(status: number, headers: ReadonlyArray<readonly [string, string]>, bytes: Uint8Array, event: LambdaHttpEvent): LambdaHttpResult {
  const single: Record<string, string> = {};
  const multi: Record<string, string[]> = {};
  let repeated = false;
  for (const [name, value] of headers) {
    const seen = single[name];
    if (seen === undefined) {
      single[name] = value;
      multi[name] = [value];
    } else {
      repeated = true;
      multi[name]!.push(value);
      single[name] = `${seen}, ${value}`;
    }
  }
  const { body, isBase64Encoded } = encodeBody(isNullBodyStatus(status) ? new Uint8Array(0) : bytes, single['content-type']);
  if (repeated && !isHttpApi(event)) return { statusCode: status, multiValueHeaders: multi, body, isBase64Encoded };
  return { statusCode: status, headers: single, body, isBase64Encoded };
}

/** The stored answer, replayed, with `Idempotent-Replayed: true`. */
export function replayResult(stored: StoredResponse, event: LambdaHttpEvent): LambdaHttpResult {
  return resultOf(stored.status, replayHeaderList(stored), replayBody(stored), event);
}

/** A problem+json result for an idempotency error. */
export function problemResult(error: IdempotencyHttpError, typeBase: string, event: LambdaHttpEvent): LambdaHttpResult {
  const headers: Array<readonly [string, string]> = Object.entries(error.headers);
  headers.push(['content-type', PROBLEM_CONTENT_TYPE]);
  return resultOf(error.status, headers, Buffer.from(JSON.stringify(error.problem(typeBase))), event);
}

/** The 500 stored and sent when the handler throws: Stripe keeps it, so the retry does not run again. */
export function handlerErrorResult(): LambdaHttpResult {
  const problem = { type: 'about:blank', title: 'Internal Server Error', status: 500, detail: 'The handler failed.' };
  return { statusCode: 500, headers: { 'content-type': PROBLEM_CONTENT_TYPE }, body: JSON.stringify(problem), isBase64Encoded: false };
}

/** What a decision other than `execute` answers, or undefined for execute and pass. */
export function answerOf(engine: IdempotencyEngine<LambdaHttpEvent>, decision: Decision<LambdaHttpEvent>, event: LambdaHttpEvent): LambdaHttpResult | undefined {
  if (decision.kind === 'replay') return replayResult(decision.response, event);
  if (decision.kind === 'reject') return problemResult(decision.error, engine.options.problemTypeBase, event);
  return undefined;
}
