import { InvalidOptionError } from '../core/errors.js';
import { parseIdempotencyKey } from '../core/key.js';
import { raceAbort } from './backoff.js';
import { BodyNotReplayableError } from './errors.js';
import type { ResolvedClientOptions } from './options.js';
import { concatBytes } from '../core/bytes.js';

/** `RequestInit`, plus async-iterable bodies (Node Readable) and a per-call key. */
export type IdempotentRequestInit = Omit<RequestInit, 'body'> & {
  readonly body?: BodyInit | AsyncIterable<Uint8Array | string> | null;
  /** This call's key, instead of a generated one. Same rules as the header; must agree with it if both are set. */
  readonly idempotencyKey?: string;
};

/** One logical call, ready to be sent identically on every attempt. */
export interface PreparedRequest {
  readonly url: string;
  readonly method: string;
  readonly key: string | undefined;
  /** Everything but the body, the signal and `redirect`: the same headers (key included) every time. */
  readonly init: RequestInit;
  /**
   * The bytes sent on every attempt and every followed redirect. Never handed to fetch itself:
   * each send gets a copy, so a fetch that transfers (detaches) its body's buffer cannot empty it.
   */
  readonly body: Uint8Array<ArrayBuffer> | null;
  /** The caller's redirect mode: `follow` is done by the client (same origin only), the others by fetch. */
  readonly redirect: RequestRedirect;
  readonly signal: AbortSignal | undefined;
  /** Whether sending it more than once is safe: it carries a key, or its method is idempotent. */
  readonly repeatable: boolean;
}

const REDIRECT_MODES: ReadonlySet<unknown> = new Set(['follow', 'manual', 'error']);

/** RFC 9110 §9.2.2: methods whose repetition has the effect of one request. */
const IDEMPOTENT_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);

/**
 * Resolves the key and buffers the body once, so every attempt sends the same key and the same
 * bytes. Everything that could make a retry differ from the first attempt is refused here, before
 * anything is sent.
 */
export async function prepareRequest(
  input: RequestInfo | URL,
  init: IdempotentRequestInit | undefined,
  options: ResolvedClientOptions,
): Promise<PreparedRequest> {
  const request = input instanceof Request ? input : undefined;
  // Parsed here so that a bad URL fails before anything is counted or sent (fetch's TypeError).
  const url = request ? request.url : new URL(input instanceof URL ? input.href : String(input)).href;
  const method = init?.method ?? request?.method ?? 'GET';
  const headers = new Headers(init?.headers ?? request?.headers);
  const signal = (init && 'signal' in init ? init.signal : request?.signal) ?? undefined;
  signal?.throwIfAborted();

  const key = resolveKey(headers, init?.idempotencyKey, method, options);
  const source = init?.body ?? request?.body ?? null;
  if (source !== null && init?.body == null && request?.bodyUsed) {
    throw new BodyNotReplayableError('the Request body was already read');
  }
  const body = source === null ? null : await bufferBody(source, method, headers, options.maxBodyBytes, signal);

  // Fields a Request input carries besides its body; the caller's init overrides them, as with fetch.
  const inherited: RequestInit = request
    ? { redirect: request.redirect, credentials: request.credentials, cache: request.cache, integrity: request.integrity,
        keepalive: request.keepalive, referrer: request.referrer, referrerPolicy: request.referrerPolicy }
    : {};
  const { idempotencyKey: _key, body: _body, signal: _signal, headers: _headers, method: _method, ...rest } = init ?? {};
  const { redirect = 'follow', ...fields } = Object.assign({}, inherited, rest as RequestInit);
  if (!REDIRECT_MODES.has(redirect)) throw new InvalidOptionError('redirect', `expected 'follow', 'manual' or 'error', got ${String(redirect)}`);
  return {
    url,
    method,
    key,
    init: Object.assign(fields, { method, headers }),
    body,
    redirect,
    signal,
    repeatable: key !== undefined || IDEMPOTENT_METHODS.has(method.toUpperCase()),
  };
}

/** The caller's key (header or `idempotencyKey`), a new UUID for a covered method, or none. */
function resolveKey(headers: Headers, perCall: unknown, method: string, options: ResolvedClientOptions): string | undefined {
  const { header } = options;
  // Validated with the server's own rules, so a bad key fails here rather than as a 400.
  const fromHeader = parseIdempotencyKey(headers.get(header), header);
  if (perCall !== undefined) {
    if (typeof perCall !== 'string') throw new InvalidOptionError('idempotencyKey', 'expected a string');
    const key = parseIdempotencyKey(perCall, header);
    if (fromHeader !== undefined && fromHeader !== key) {
      throw new InvalidOptionError('idempotencyKey', `differs from the \`${header}\` header already on the request`);
    }
    if (fromHeader === undefined) headers.set(header, perCall.trim());
    return key;
  }
  if (fromHeader !== undefined || !options.methods.has(method.toUpperCase())) return fromHeader;
  // Web Crypto rather than node:crypto, so the client also runs in Bun, Deno and edge runtimes.
  const key = globalThis.crypto.randomUUID();
  headers.set(header, key);
  return key;
}

/**
 * Reads the body into memory once. In-memory bodies (string, bytes, Blob, form data) are copied
 * whatever their size; streams are read up to `limit` and refused beyond it, because a one-shot
 * stream cannot be sent a second time. FormData is serialised once, so its multipart boundary,
 * and hence its bytes, are the same on every attempt.
 */
async function bufferBody(
  source: NonNullable<IdempotentRequestInit['body']>,
  method: string,
  headers: Headers,
  limit: number,
  signal: AbortSignal | undefined,
): Promise<Uint8Array<ArrayBuffer>> {
  const inMemory = typeof source === 'string' || source instanceof ArrayBuffer || ArrayBuffer.isView(source)
    || source instanceof Blob || source instanceof URLSearchParams || source instanceof FormData;
  if (source instanceof ReadableStream && source.locked) throw new BodyNotReplayableError('the stream is locked (already being read)');
  // A Request does the type dispatch and picks the default Content-Type, exactly as fetch would.
  // It throws fetch's own TypeError for a body on GET/HEAD.
  const carrier = new Request('http://body.invalid/', { method, body: source as BodyInit, duplex: 'half' } as RequestInit);
  const type = carrier.headers.get('content-type');
  if (type !== null && !headers.has('content-type')) headers.set('content-type', type);
  if (!carrier.body) return new Uint8Array(0);
  try {
    return await readUpTo(carrier.body, inMemory ? Infinity : limit, signal);
  } catch (error) {
    if (error instanceof BodyNotReplayableError || signal?.aborted) throw error;
    throw new BodyNotReplayableError('reading the stream failed', { cause: error });
  }
}

async function readUpTo(stream: ReadableStream<Uint8Array>, limit: number, signal: AbortSignal | undefined): Promise<Uint8Array<ArrayBuffer>> {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await raceAbort(reader.read(), signal);
      if (done) break;
      size += value.byteLength;
      if (size > limit) throw new BodyNotReplayableError(`the stream is larger than \`maxBodyBytes\` (${limit} bytes)`);
      chunks.push(value);
    }
  } catch (error) {
    await reader.cancel(error).catch(() => {});
    throw error;
  }
  // Stream chunks are backed by plain ArrayBuffers, so the joined bytes are too.
  return concatBytes(chunks, size) as Uint8Array<ArrayBuffer>;
}
