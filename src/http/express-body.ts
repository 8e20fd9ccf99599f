import type { Request } from 'express';
import type { RequestBody } from '../core/engine.js';
import { BodyNotKeptError } from '../core/errors.js';
import { isJsonMediaType } from '../core/fingerprint.js';
import { checkLimit, parseBody, readLimited } from './node-body.js';

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
