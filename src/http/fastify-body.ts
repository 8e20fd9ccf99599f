import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { RequestBody } from '../core/engine.js';
import { isJsonMediaType } from '../core/fingerprint.js';

/**
 * The request body as the fingerprint sees it. Fastify reads and parses the body itself, within
 * the route's `bodyLimit`; the fingerprint is taken from what it parsed, with the bytes a
 * preParsing hook kept as they passed, so the body is neither buffered twice nor parsed twice, and
 * the fingerprint hashes what the client sent (a number's every digit) rather than what the parser
 * made of it. The plugin's flow is in fastify.ts.
 */

/** The stream a preParsing hook receives (the request itself, or what an earlier hook put in its place). */
export type BodyStream = NodeJS.ReadableStream & { readonly readableEnded?: boolean };

/** The bytes of one request body, collected as they pass on their way to Fastify's parser. */
interface BodyTee {
  readonly payload: BodyStream;
  readonly chunks: Buffer[];
  /** Every byte seen; past the limit, chunks are no longer kept (Fastify refuses the body too). */
  size: number;
}

/** A request decoration (so every request has it from construction): the tee of a keyed request's body, or null. */
const kBody = Symbol('idemkit.fastify.body');
type TeedRequest = FastifyRequest & { [kBody]: BodyTee | null };

const EMPTY = Buffer.alloc(0);

/** Gives every request of `fastify` the slot `teeBody` keeps its bytes in (once per instance). */
export function decorateBody(fastify: FastifyInstance): void {
  if (!fastify.hasRequestDecorator(kBody as unknown as string)) fastify.decorateRequest(kBody as unknown as string, null);
}

/**
 * Listens to the body stream without reading it: the listener is prepended, and prependListener
 * (unlike on('data')) does not start the stream flowing, so the bytes still go to Fastify's parser,
 * whenever and however it reads them (every read emits 'data'). Whether every byte was seen is
 * asked of the stream afterwards (`readableEnded`) rather than told by an 'end' listener, which
 * cost more than the rest together. What exact digits cost a keyed request: docs/performance.md.
 */
export function teeBody(request: FastifyRequest, payload: BodyStream, limit: number): void {
  const tee: BodyTee = { payload, chunks: [], size: 0 };
  payload.prependListener('data', (chunk: Buffer | string) => {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    if ((tee.size += bytes.byteLength) <= limit) tee.chunks.push(bytes);
  });
  (request as TeedRequest)[kBody] = tee;
}

/** The body of a Fastify request as the fingerprint sees it, once Fastify has parsed it; the tee is let go. */
export function requestBody(request: FastifyRequest, limit: number): RequestBody<FastifyRequest> {
  const teed = teedBytes((request as TeedRequest)[kBody], limit);
  (request as TeedRequest)[kBody] = null;
  return bodyFacts(request.body, request.headers['content-type'], teed);
}

/** The body bytes the tee saw, when it saw all of them. */
function teedBytes(tee: BodyTee | null, limit: number): Buffer | undefined {
  if (tee === null || tee.payload.readableEnded !== true || tee.size > limit) return undefined;
  const { chunks } = tee;
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, tee.size);
}

/**
 * The fingerprint's view of the body: the bytes the client sent when they were kept whole (with
 * the parsed JSON, which spares a second parse), else what Fastify's parser made of them.
 */
function bodyFacts(body: unknown, contentType: string | undefined, bytes: Buffer | undefined): RequestBody<FastifyRequest> {
  const json = contentType !== undefined && isJsonMediaType(contentType);
  if (bytes !== undefined) {
    // A JSON parser's object or array spares the fingerprint a second parse; a Buffer or a
    // string (a catch-all parser's) is not a parsed value.
    const parsedValue = json && typeof body === 'object' && body !== null && !(body instanceof Uint8Array);
    return parsedValue ? { body: bytes, parsedJson: { value: body } } : { body: bytes };
  }
  // The bytes were not seen whole (a parser that did not read them all, or no body at all).
  if (body instanceof Uint8Array) return { body };
  if (json && body !== undefined) return { body: EMPTY, parsedJson: { value: body } };
  if (body === undefined || body === null) return { body: EMPTY };
  if (typeof body === 'string') return { body: Buffer.from(body) };
  // A parser of the app's own (forms, say) produced something else: the fingerprint encodes it.
  return { body: EMPTY, parsedJson: { value: body } };
}
