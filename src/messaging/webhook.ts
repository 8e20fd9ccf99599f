/**
 * Webhook receivers: verify the Standard Webhooks signature and timestamp BEFORE any store is
 * touched, then process each `webhook-id` once with consumeOnce. One core answers plain
 * { status, headers, body } objects; the Web, Express and Fastify forms only translate.
 */
import type { IdempotencyHttpError } from '../core/errors.js';
import { BodyTooLargeError, InvalidOptionError, PROBLEM_CONTENT_TYPE } from '../core/errors.js';
import type { Clock, IdempotencyStore } from '../core/store.js';
import { optionReader } from '../core/option-reader.js';
import { readLimited } from '../core/bytes.js';
import type { SqlDatabase, SqlExecutor } from '../drivers/sql-executor.js';
import type { StoreConsumeResult } from './consume.js';
import { consumerOption, messageIdOption, sqlConsumer, storeConsumer } from './consume.js';
import { InvalidMessageIdError, MissingMessageIdError, WebhookRawBodyError, WebhookVerificationError } from './errors.js';
import { clockOption, executorOption, retentionOption, tableOption } from './table.js';
import type { HeadersLike, VerifyOptions } from './webhook-verify.js';
import { WEBHOOK_ALIASES, toleranceOption, verifyWithKeys, webhookKeys } from './webhook-verify.js';

export interface WebhookEvent {
  /** `webhook-id`: the same on every retry of one event; the dedup key. */
  readonly id: string;
  /** `webhook-timestamp` in seconds (of this attempt, not of the event). */
  readonly timestamp: number;
  /** The raw body, as signed. */
  readonly body: Uint8Array;
  /** The body as UTF-8 text. */
  text(): string;
  /** The body parsed as JSON. */
  json<T = unknown>(): T;
}

/**
 * A receiver's options: `db` (SQL, the event record commits with onEvent's writes, which get `tx`)
 * or `store` (any store: at most once per lease, not atomic with onEvent's writes, no `tx`).
 */
export type WebhookOptions = SqlWebhookOptions | StoreWebhookOptions;

/** With `db`: `onEvent` gets the transaction the event record commits in. */
export interface SqlWebhookOptions extends WebhookCommonOptions {
  readonly db: SqlExecutor | SqlDatabase;
  readonly store?: undefined;
  /** Runs once per event id, inside the transaction `tx` that records it. */
  readonly onEvent: (event: WebhookEvent, tx: SqlExecutor) => Promise<unknown> | unknown;
}

/** With a non-SQL `store`: at most once per lease, not atomic with onEvent's writes. */
export interface StoreWebhookOptions extends WebhookCommonOptions {
  readonly store: IdempotencyStore;
  readonly db?: undefined;
  /** Runs once per event id (per lease); there is no transaction, so `tx` is undefined. */
  readonly onEvent: (event: WebhookEvent, tx: undefined) => Promise<unknown> | unknown;
}

/** What both kinds of receiver take. */
export interface WebhookCommonOptions extends VerifyOptions {
  /** Names this receiver: event ids are deduplicated per consumer. */
  readonly consumer: string;
  /** Larger bodies answer 413 before verification. @default 1_048_576 */
  readonly maxBodyBytes?: number;
  readonly table?: string;
  readonly retentionMs?: number;
  readonly leaseMs?: number;
  /**
   * The 409 answered while another delivery of the event is being processed says to retry after
   * this long (never more than what is left of that delivery's lease). @default 1_000
   */
  readonly retryAfterMs?: number;
  /** Sees verification failures and handler errors (for logs). */
  readonly onError?: (error: unknown) => void;
  /**
   * The base of the `type` of the problems answered (`webhook-unverified`, `webhook-in-progress`,
   * …): an absolute URI ending in `/` or `#` (your own documentation), or a URN ending in `:`.
   * @default 'urn:idemkit:problem:'
   */
  readonly problemTypeBase?: string;
}

/** A framework-neutral answer. */
export interface WebhookReply {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

export interface WebhookReceiver {
  readonly maxBodyBytes: number;
  /** The checked `problemTypeBase` its problems' `type`s start with. */
  readonly problemTypeBase: string;
  /** Verifies, then processes once. `body` must be the raw bytes. */
  receive(headers: HeadersLike, body: Uint8Array): Promise<WebhookReply>;
}

/** Validates the options once and returns the framework-neutral receiver. */
export function webhookReceiver(options: WebhookOptions): WebhookReceiver {
  const read = optionReader('webhookReceiver()', options, { aliases: WEBHOOK_ALIASES });
  const keys = webhookKeys(read.value('secret'));
  const toleranceSec = toleranceOption(read.value('toleranceSec'));
  const clock: Clock = clockOption(read.value('clock'));
  const consumer = consumerOption(read.value('consumer'));
  // The options are checked below to carry exactly one of db and store, so `tx` matches onEvent.
  const onEvent = read.function('onEvent', { required: true, expected: 'a function (event, tx) => Promise' }) as (event: WebhookEvent, tx: SqlExecutor | undefined) => unknown;
  // Bound, so one written as a method still sees the options object as `this`.
  const onError = read.function('onError')?.bind(options);
  const maxBodyBytes = read.integer('maxBodyBytes', { default: 1024 * 1024 });
  const retentionMs = retentionOption(read.value('retentionMs'));
  if ((read.value('db') === undefined) === (read.value('store') === undefined)) read.fail('db', 'give exactly one of `db` or `store`');
  const db = options.db === undefined ? undefined : executorOption(options.db);
  if (options.store !== undefined && typeof options.store?.claim !== 'function') read.fail('store', 'expected an IdempotencyStore');
  const leaseMs = read.duration('leaseMs', { default: 60_000, min: 1 });
  const retryAfterMs = read.duration('retryAfterMs', { default: 1_000, min: 1 });
  const table = tableOption(read.value('table'));
  const problemTypeBase = read.problemTypeBase('problemTypeBase');
  read.done();
  // Prepared here, once: per event the receiver checks the id and runs.
  const base = { consumer, retentionMs, clock };
  const consume = db ? sqlConsumer(base, db, table) : storeConsumer(base, options.store!, leaseMs);
  const problem = problemAnswer(problemTypeBase);
  const report = (error: unknown) => {
    try {
      onError?.(error);
    } catch {
      // logging only
    }
  };

  return {
    maxBodyBytes,
    problemTypeBase,
    async receive(headers, body) {
      let verified;
      try {
        verified = verifyWithKeys(headers, body, keys, toleranceSec, clock);
      } catch (error) {
        if (!(error instanceof WebhookVerificationError)) throw error;
        report(error);
        return problem(401, 'webhook-unverified', 'Webhook could not be verified', error.message, { reason: error.reason });
      }
      const event = toEvent(verified.id, verified.timestamp, body);
      const run = (tx: SqlExecutor | undefined) => Promise.resolve(onEvent(event, tx));
      let result: StoreConsumeResult<unknown>;
      try {
        result = await consume(messageIdOption(verified.id), run);
      } catch (error) {
        report(error);
        if (error instanceof MissingMessageIdError || error instanceof InvalidMessageIdError) {
          return problem(400, 'webhook-id-invalid', 'webhook-id is unusable', error.message);
        }
        return problem(500, 'webhook-failed', 'Webhook processing failed', 'The event was not processed and nothing was recorded; a retry of this webhook will process it.');
      }
      switch (result.status) {
        case 'processed':
        case 'duplicate':
          return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: verified.id, status: result.status }) };
        case 'in_flight':
          return problem(409, 'webhook-in-progress', 'Webhook in progress', 'This event is being processed by another delivery; retry later.', {}, {
            'retry-after': String(Math.max(1, Math.ceil(Math.min(retryAfterMs, result.retryAfterMs) / 1000))),
          });
      }
    },
  };
}

function toEvent(id: string, timestamp: number, body: Uint8Array): WebhookEvent {
  return {
    id,
    timestamp,
    body,
    text: () => Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8'),
    json<T>() {
      return JSON.parse(this.text()) as T;
    },
  };
}

/** The receiver's own problems, their `type` under `typeBase`. */
function problemAnswer(typeBase: string) {
  return (status: number, slug: string, title: string, detail: string, extensions: Record<string, unknown> = {}, headers: Record<string, string> = {}): WebhookReply => ({
    status,
    headers: Object.assign({ 'content-type': PROBLEM_CONTENT_TYPE }, headers),
    body: JSON.stringify(Object.assign({}, extensions, { type: typeBase + slug, title, status, detail })),
  });
}

function fromHttpError(error: IdempotencyHttpError, typeBase: string): WebhookReply {
  return { status: error.status, headers: { 'content-type': PROBLEM_CONTENT_TYPE, ...error.headers }, body: JSON.stringify(error.problem(typeBase)) };
}

/** A Web handler, `(Request) => Promise<Response>`: Hono (`c.req.raw`), Bun, Deno, Workers, Next route handlers. */
export function webhookHandler(options: WebhookOptions): (request: Request) => Promise<Response> {
  const receiver = webhookReceiver(options);
  return async (request) => {
    let body: Uint8Array;
    try {
      body = await readLimited(request, receiver.maxBodyBytes);
    } catch (error) {
      if (error instanceof BodyTooLargeError) return toResponse(fromHttpError(error, receiver.problemTypeBase));
      throw error;
    }
    return toResponse(await receiver.receive(request.headers, body));
  };
}

function toResponse(reply: WebhookReply): Response {
  return new Response(reply.body, { status: reply.status, headers: reply.headers });
}

/** The part of an Express request the adapter reads; `body` must be a Buffer from `express.raw()`. */
export interface ExpressLikeRequest {
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body?: unknown;
}
export interface ExpressLikeResponse {
  status(code: number): ExpressLikeResponse;
  set(headers: Record<string, string>): ExpressLikeResponse;
  send(body: string): unknown;
}

/**
 * Express middleware. Mount it behind `express.raw({ type: '*\/*', limit })`: the signature covers
 * the exact bytes, so a body already parsed by `express.json()` cannot be verified and is refused
 * with WebhookRawBodyError (passed to `next`).
 */
export function webhookExpress(options: WebhookOptions): (req: ExpressLikeRequest, res: ExpressLikeResponse, next: (error?: unknown) => void) => void {
  const receiver = webhookReceiver(options);
  return (req, res, next) => {
    const body = rawBody(req.body, 'Express: mount express.raw({ type: "*/*" }) before the webhook handler');
    if (body instanceof Error) return next(body);
    if (body.byteLength > receiver.maxBodyBytes) return void send(res, fromHttpError(new BodyTooLargeError(receiver.maxBodyBytes), receiver.problemTypeBase));
    receiver.receive(req.headers, body).then((reply) => send(res, reply), next);
  };
}

function send(res: ExpressLikeResponse, reply: WebhookReply) {
  res.status(reply.status).set({ ...reply.headers }).send(reply.body);
}

/** The part of a Fastify instance the plugin uses. */
export interface FastifyLikeInstance {
  register(plugin: (scope: FastifyLikeInstance) => Promise<void>): unknown;
  removeAllContentTypeParsers(): void;
  addContentTypeParser(
    type: string,
    options: { parseAs: 'buffer'; bodyLimit?: number },
    parser: (request: unknown, body: Buffer, done: (error: Error | null, body?: unknown) => void) => void,
  ): void;
  post(path: string, handler: (request: { headers: ExpressLikeRequest['headers']; body?: unknown }, reply: FastifyLikeReply) => Promise<unknown>): unknown;
}
export interface FastifyLikeReply {
  code(status: number): FastifyLikeReply;
  headers(values: Record<string, string>): FastifyLikeReply;
  send(body: string): unknown;
}

/**
 * Registers `POST path` on Fastify in its own encapsulated scope, where every content type is
 * read as a raw Buffer (the signature covers the exact bytes); other routes keep their parsers.
 * Fastify's own `bodyLimit` is set to `maxBodyBytes` for the route (413 past it).
 */
export function webhookFastify(fastify: FastifyLikeInstance, path: string, options: WebhookOptions): unknown {
  const receiver = webhookReceiver(options);
  if (typeof path !== 'string' || !path.startsWith('/')) throw new InvalidOptionError('path', 'expected a route path starting with /');
  return fastify.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: receiver.maxBodyBytes }, (_request, body, done) => done(null, body));
    scope.post(path, async (request, reply) => {
      const body = rawBody(request.body ?? new Uint8Array(0), 'Fastify: the body was parsed before the webhook route');
      if (body instanceof Error) throw body;
      const answer = await receiver.receive(request.headers, body);
      return reply.code(answer.status).headers({ ...answer.headers }).send(answer.body);
    });
  });
}

function rawBody(body: unknown, hint: string): Uint8Array | WebhookRawBodyError {
  if (body instanceof Uint8Array) return body;
  if (typeof body === 'string') return Buffer.from(body, 'utf8');
  if (body === undefined) return new Uint8Array(0);
  return new WebhookRawBodyError(`The webhook body is not raw bytes (got ${typeof body}); the signature covers the exact bytes sent. ${hint}`);
}
