import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Request } from 'express';
import type { RequestBody, RequestReader } from '../core/engine.js';
import { BodyTooLargeError } from '../core/errors.js';
import { isJsonMediaType } from '../core/fingerprint.js';
import type { ExpressBody, ParsedRequest } from '../http/express-body.js';
import { requestBody } from '../http/express-body.js';
import { headerValues } from '../http/node-headers.js';

/**
 * The request a Nest route receives on either platform, as idemkit's `scope` hook sees it: the
 * platform's own object (Express's `Request`, or Fastify's `FastifyRequest`), with whatever an
 * earlier guard or middleware set on it (`request.user`, say).
 */
export interface NestRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body?: unknown;
  readonly [property: string]: unknown;
}

/** What the reader looks at beyond `NestRequest`: Fastify's `raw`, Express's `originalUrl`, Nest's `rawBody`. */
interface PlatformRequest extends NestRequest {
  /** Fastify: the Node request underneath. Express's request is a Node request itself. */
  readonly raw?: IncomingMessage;
  readonly originalUrl?: string;
  /** Kept by Nest's `rawBody: true` (NestFactory.create), on both platforms. */
  readonly rawBody?: Buffer | string;
}

/** The body as the fingerprint sees it; `readHere` when the Express stream was read by idemkit. */
export interface NestBody extends RequestBody<NestRequest> {
  readonly readHere?: boolean;
}

const EMPTY = Buffer.alloc(0);

/** The Node request underneath a platform request. */
export function nodeRequest(request: NestRequest): IncomingMessage {
  return ((request as PlatformRequest).raw ?? request) as IncomingMessage;
}

/** The Node response underneath a platform response (Fastify's reply, or Express's response itself). */
export function nodeResponse(response: object): ServerResponse {
  return ((response as { raw?: ServerResponse }).raw ?? response) as ServerResponse;
}

/** How the engine reads a request under Nest, on Express or on Fastify. */
export const nestReader: RequestReader<NestRequest, NestBody> = {
  method: (request) => request.method,
  header: (request, name) => headerValues(nodeRequest(request), name),
  path: (request) => (request as PlatformRequest).originalUrl ?? request.url,
  contentType: (request) => request.headers['content-type'],
  readBody: (request, limit) => {
    // Express: body-parser's result (with the bytes Nest's `rawBody: true` keeps), or the stream
    // read here when no parser took the request (text/plain under Nest's defaults).
    if ((request as PlatformRequest).raw === undefined) return requestBody(request as unknown as ParsedRequest & Request, limit) as ExpressBody | Promise<ExpressBody> as NestBody | Promise<NestBody>;
    return fastifyBody(request as PlatformRequest, limit);
  },
};

/**
 * A Fastify request's body: Fastify parsed it before any Nest guard ran, so the fingerprint takes
 * the bytes Nest kept (`rawBody: true`), or else what the parser made of them.
 */
function fastifyBody(request: PlatformRequest, limit: number): NestBody {
  const contentType = request.headers['content-type'];
  const declared = Number(request.headers['content-length'] ?? NaN);
  if (declared > limit) throw new BodyTooLargeError(limit);
  const json = contentType !== undefined && isJsonMediaType(contentType);
  const { body, rawBody } = request;
  if (rawBody !== undefined) {
    const bytes = typeof rawBody === 'string' ? Buffer.from(rawBody) : rawBody;
    if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
    const parsedValue = json && typeof body === 'object' && body !== null && !(body instanceof Uint8Array);
    return parsedValue ? { body: bytes, parsedJson: { value: body } } : { body: bytes };
  }
  if (body instanceof Uint8Array || typeof body === 'string') {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
    return { body: bytes };
  }
  if (body === undefined || body === null) return { body: EMPTY };
  // A parsed JSON value (its exact digits are lost without `rawBody: true`), or a form's object.
  return { body: EMPTY, parsedJson: { value: body } };
}
