/**
 * The one test app every HTTP adapter builds natively, so the matrix suite can run unchanged
 * against all of them over real HTTP.
 *
 * Every app:
 * - runs an auth step BEFORE the idempotency layer: without `Authorization: Bearer <token>` it
 *   answers 401 `{"error":"unauthorized"}`; the idempotency `scope` is `<token>`;
 * - mounts the adapter with the given options (plus that scope hook);
 * - serves these routes:
 *   - `POST /charges` and `PATCH /charges` (same handler): executions++; waits `x-delay-ms` ms if that header is set; answers 201 JSON
 *     `{ id: randomUUID(), n: executions, body }` (body parsed when JSON, else the text), with
 *     headers `location: /charges/<id>`, `set-cookie: session=secret`, `x-request-id: <random>`;
 *   - `POST /status/:code`: executions++; answers `code` with JSON `{ error: 'status <code>', n }`;
 *   - `POST /throw`: executions++; throws `new Error('boom')` (the framework's own error path);
 *   - `POST /binary?size=N`: executions++; 200 `application/octet-stream`, byte i = (i * 31 + 7) & 255;
 *   - `POST /empty`: executions++; 204 without a body;
 *   - `POST /text`: executions++; 200 `text/plain; charset=utf-8` with `echo:<request body text>`;
 *   - `POST /discard`: calls the context's `discard()` and answers 400 `{ error: 'invalid' }` (no executions++);
 *   - `POST /tx?fail=throw|500`: executions++; inserts `(key)` into table `effects` through the
 *     context's `tx` (a better-sqlite3 Database); then throws, answers 500, or answers 201 `{ ok: true }`;
 *   - `POST /tx-slow`: executions++; waits `x-delay-ms` ms, then inserts `(key)` into `effects`
 *     through the context's `tx` and answers 201 `{ ok: true }` (a write that may come after a
 *     disconnect, or past `maxExecutionMs`);
 *   - `GET /charges` and `PUT /charges`: executions++; 200 JSON `{ n: executions }`.
 */
import type { IdempotencyOptions } from '../../src/core/options.js';

export interface AppState {
  executions: number;
}

export interface TestApp {
  /** Base URL, e.g. http://127.0.0.1:PORT */
  readonly url: string;
  close(): Promise<void>;
}

/** Options for the adapter; the app adds `scope` from the bearer token itself. */
export type HarnessOptions = Omit<IdempotencyOptions<never>, 'scope'>;

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

export function delayMs(value: string | null | undefined): Promise<void> | undefined {
  const ms = Number(value ?? 0);
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : undefined;
}
