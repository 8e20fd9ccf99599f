/**
 * The one test app every HTTP adapter builds natively, so the matrix suite can run unchanged
 * against all of them over real HTTP.
 *
 * Every app:
 * - runs an auth step BEFORE the idempotency layer: without `Authorization: Bearer <token>` it
 *   answers 401 `{"error":"unauthorized"}`; the idempotency `scope` is `<token>`;
 * - mounts the adapter with the given options (plus that scope hook);
 * - serves these routes:
 *   - `POST /charges` and `PATCH /charges` (same handler): executions++; waits `x-delay-ms` ms if that header is set,
 *     and for `AppState.hold` if `x-hold` is set; answers 201 JSON
 *     `{ id: randomUUID(), n: executions, body }` (body parsed when JSON, else the text), with
 *     headers `location: /charges/<id>`, `set-cookie: session=secret`, `x-request-id: <random>`;
 *   - `POST /status/:code`: executions++; answers `code` with JSON `{ error: 'status <code>', n }`;
 *   - `POST /throw`: executions++; throws `new Error('boom')` (the framework's own error path);
 *   - `POST /binary?size=N`: executions++; 200 `application/octet-stream`, byte i = (i * 31 + 7) & 255;
 *   - `POST /empty`: executions++; 204 without a body;
 *   - `POST /text`: executions++; 200 `text/plain; charset=utf-8` with `echo:<request body text>`;
 *   - `POST /discard`: calls the context's `discard()` and answers 400 `{ error: 'invalid' }` (no executions++);
 *   - `POST /tx?fail=throw|throw-value|500`: executions++; inserts `(key)` into table `effects` through the
 *     context's `tx` (a better-sqlite3 Database); then throws an Error, throws the string `'boom'`,
 *     answers 500, or answers 201 `{ ok: true }`;
 *   - `POST /tx-slow`: executions++; waits `x-delay-ms` ms, then inserts `(key)` into `effects`
 *     through the context's `tx` and answers 201 `{ ok: true }` (a write that may come after a
 *     disconnect, or past `maxExecutionMs`);
 *   - `GET /charges` and `PUT /charges`: executions++; 200 JSON `{ n: executions }`;
 *   - `POST /orders/:id/cancel`: a body-less endpoint; executions++; 201 JSON
 *     `{ order: id, status: 'cancelled', n: executions }`;
 *   - `POST /throw-value/:kind`: executions++; throws `THROWN_VALUES[kind]`, a value that is not an
 *     `Error` (`'boom'`, `undefined`, `null`, `{}`), from the route itself (synchronously where the
 *     framework runs routes synchronously: Express 4 ignores a route's promise);
 *   - `POST /partial`: executions++; starts a `text/plain` body with `PARTIAL_CHUNK`, then fails in
 *     the framework's own idiom: Express `res.write(PARTIAL_CHUNK)` then throws; Fastify sends a
 *     stream that yields `PARTIAL_CHUNK` then errors; Nest returns a `StreamableFile` of such a
 *     stream; Web and Hono return a `Response` whose body stream does the same.
 *
 * An app also says, in `TestApp.quirks`, where its framework's own rules give another answer
 * than the matrix expects of the others.
 */
import type { Database as SqliteDatabase } from 'better-sqlite3';
import type { IdempotencyContext } from '../../src/core/engine.js';
import type { IdempotencyOptions } from '../../src/core/options.js';

export interface AppState {
  executions: number;
  /** What a request sent with `x-hold` waits for before it answers: a gate the test opens. */
  hold?: Promise<void>;
}

export interface TestApp {
  /** Base URL, e.g. http://127.0.0.1:PORT */
  readonly url: string;
  close(): Promise<void>;
  readonly quirks?: FrameworkQuirks;
}

export interface FrameworkQuirks {
  /**
   * A route that throws `undefined` or `null` calls `next()` with it, which Express reads as "no
   * error, go on to the next route": the answer is the framework's 404, not a 500.
   */
  readonly falsyThrowIsNext?: boolean;
  /**
   * The status of the answer to a body stream that fails before its headers went out, when the
   * framework gives it another than 500: Nest on Express answers a failing `StreamableFile` with
   * 400 "Bad Request" (StreamableFile's own error handler, whenever `headersSent` is false, which
   * it always is while idemkit holds the answer back). The answer is still replaced whole, stored
   * and replayed byte for byte.
   */
  readonly failedStreamStatus?: number;
  /**
   * The status the framework's own JSON parser answers, before the key is claimed, to a body sent
   * as `application/json` that does not parse (Express's and Fastify's parsers, Nest's on either,
   * the Koa adapter's): 400. Without it (Web, Hono) idemkit reads the bytes and fingerprints them raw.
   */
  readonly unparsableJsonStatus?: number;
}

/** What `POST /throw-value/:kind` throws. */
export const THROWN_VALUES: Readonly<Record<string, unknown>> = { string: 'boom', undefined, null: null, object: {} };

/** The start of the body `POST /partial` writes before it fails. */
export const PARTIAL_CHUNK = 'partial body, then a failure ';

/** Options for the adapter; the app adds `scope` from the bearer token itself. */
export type HarnessOptions = Omit<IdempotencyOptions<never>, 'scope' | 'previousScope'>;

export type AppFactory = (options: HarnessOptions, state: AppState) => Promise<TestApp>;

/** The bytes `/binary?size=N` answers with. */
export function binaryPattern(size: number): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(size);
  for (let i = 0; i < size; i++) out[i] = (i * 31 + 7) & 255;
  return out;
}

/** The scope every app derives from `Authorization`, or undefined when it must answer 401. */
export function bearerToken(authorization: string | null | undefined): string | undefined {
  const match = /^Bearer ([^\s]+)$/.exec(authorization ?? '');
  return match?.[1];
}

/** The wait `x-hold` asks for: `state.hold` when the header is set. */
export function held(state: AppState, header: string | null | undefined): Promise<void> | undefined {
  return header ? state.hold : undefined;
}

export function delayMs(value: string | null | undefined): Promise<void> | undefined {
  const ms = Number(value ?? 0);
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : undefined;
}

/** A body stream that yields `chunk`, then fails on the next read. */
export function failingBody(chunk: string): ReadableStream<Uint8Array> {
  let sent = false;
  return new ReadableStream({
    pull(controller) {
      if (sent) return controller.error(new Error('boom'));
      sent = true;
      controller.enqueue(new TextEncoder().encode(chunk));
    },
  });
}

/**
 * The `/tx` routes' context: the apps are written once for every store, so they name the
 * transaction type the matrix runs those routes with (transactional mode on SQLite).
 */
export function sqliteContext(ctx: IdempotencyContext | undefined): IdempotencyContext<SqliteDatabase> {
  if (ctx === undefined) throw new Error('/tx ran unprotected');
  return ctx as IdempotencyContext<SqliteDatabase>;
}
