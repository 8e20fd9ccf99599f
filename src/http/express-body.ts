import type { IncomingMessage } from 'node:http';
import type { Request } from 'express';
import type { RequestBody } from '../core/engine.js';
import { BodyNotKeptError, BodyTooLargeError, RequestAbortedError } from '../core/errors.js';
import { isJsonMediaType } from '../core/fingerprint.js';

/** Body-parser's private "already parsed" flag; setting it makes express.json() & co. skip the request. */
export type ParsedRequest = Request & { _body?: boolean };

/** The body of an Express request as the fingerprint sees it. */
export interface ExpressBody extends RequestBody<Request> {
  readonly body: Buffer;
  /** True when the middleware read the stream itself: `body` is then what `req.rawBody` gives. */
  readonly readHere?: boolean;
}

const EMPTY = Buffer.alloc(0);

/**
 * The body to fingerprint. When a body parser ran first, its result stands in for the bytes (at
 * once, without a turn); otherwise the stream is read here and handed on as if a body parser had
 * read it. A JSON body is parsed once, for the route and for the fingerprint.
 */
export function requestBody(req: ParsedRequest, limit: number): ExpressBody | Promise<ExpressBody> {
  const contentType = req.headers['content-type'];
  const json = contentType !== undefined && isJsonMediaType(contentType);
  // `_body` is what body-parser sets; a stream that ended was read by something else.
  if (req._body === true || req.readableEnded || (req.complete && !req.readable)) {
    if (Buffer.isBuffer(req.rawBody)) return { body: checkLimit(req.rawBody, limit) };
    if (req.body === undefined) {
      throw new BodyNotKeptError('idemkit: the request body was read before the idempotency middleware and not kept');
    }
    // Without the bytes, a parsed JSON number has lost the digits a double cannot hold: keep
    // them with express.json({ verify }) setting req.rawBody (docs/semantics.md, "The fingerprint").
    if (json) return { body: EMPTY, parsedJson: { value: req.body } };
    const parsed: unknown = req.body;
    if (Buffer.isBuffer(parsed) || typeof parsed === 'string') return { body: checkLimit(Buffer.isBuffer(parsed) ? parsed : Buffer.from(parsed), limit) };
    // Something else (express.urlencoded()'s object, say): the fingerprint encodes the value.
    return { body: EMPTY, parsedJson: { value: parsed } };
  }
  return readLimited(req, limit).then((raw): ExpressBody => {
    if (raw.byteLength === 0) return { body: raw, readHere: true };
    const parsed = parseBody(raw, contentType, json);
    req.body = parsed;
    return json ? { body: raw, parsedJson: { value: parsed }, readHere: true } : { body: raw, readHere: true };
  });
}

function checkLimit(bytes: Buffer, limit: number): Buffer {
  if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
  return bytes;
}

function parseBody(raw: Buffer, contentType: string | undefined, json: boolean): unknown {
  if (json) {
    try {
      return JSON.parse(raw.toString('utf8'));
    } catch (cause) {
      // What express.json() would have answered: a 400 through the error handlers, before any claim.
      throw Object.assign(new SyntaxError('idemkit: the JSON request body does not parse', { cause }), {
        status: 400,
        statusCode: 400,
        expose: true,
        type: 'entity.parse.failed',
      });
    }
  }
  return contentType?.toLowerCase().startsWith('text/') ? raw.toString('utf8') : raw;
}

function readLimited(req: IncomingMessage, limit: number): Promise<Buffer> {
  if (Number(req.headers['content-length'] ?? NaN) > limit) return Promise.reject(new BodyTooLargeError(limit));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    // Settles once: an over-limit chunk settles, and the 'data' or 'close' events after it must
    // not settle again.
    const settle = (error: Error | undefined) => {
      if (settled) return;
      settled = true;
      req.off('data', onData).off('end', onEnd).off('error', settle).off('close', onClose);
      if (error) reject(error);
      else resolve(Buffer.concat(chunks, size));
    };
    // Past the limit the rest of the upload is left to flow away unbuffered; Node drains it.
    const onData = (chunk: Buffer) => {
      if (settled) return;
      size += chunk.byteLength;
      if (size > limit) settle(new BodyTooLargeError(limit));
      else chunks.push(chunk);
    };
    const onEnd = () => settle(undefined);
    const onClose = () => settle(new RequestAbortedError('idemkit: the client aborted the request before its body was read'));
    req.on('data', onData).on('end', onEnd).on('error', settle).on('close', onClose);
  });
}
