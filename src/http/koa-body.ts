import type { ParameterizedContext } from 'koa';
import type { RequestBody } from '../core/engine.js';
import { BodyNotKeptError } from '../core/errors.js';
import { isJsonMediaType } from '../core/fingerprint.js';
import { checkLimit, parseBody, readLimited } from './node-body.js';

/**
 * Koa leaves the request body unread. The fingerprint needs its bytes, so the middleware reads
 * them (within `maxBodyBytes`) and hands them on where Koa's body parsers put theirs: the parsed
 * body in `ctx.request.body` (so that @koa/bodyparser, mounted after it, skips the request) and
 * the bytes in `ctx.request.rawBody`.
 */
export interface KoaRequestBody {
  /**
   * The parsed body: a JSON value for a JSON media type, a string for `text/*`, the bytes (a
   * Buffer) otherwise; absent when the body is empty. Set by a body parser mounted before the
   * middleware, or by the middleware when it read the body itself.
   */
  body?: unknown;
  /**
   * The body bytes as received, when the middleware read them (a Buffer); @koa/bodyparser sets the
   * same field to the body text (a string) when it ran first.
   */
  rawBody?: unknown;
}

/** The body of a Koa request as the fingerprint sees it. */
export type KoaBody = RequestBody<ParameterizedContext>;

const EMPTY = Buffer.alloc(0);

/**
 * The body to fingerprint. When a body parser ran first, its result stands in for the bytes: its
 * raw text when it kept it, else the parsed value. Otherwise the stream is read here, and the
 * route finds the body where a parser would have put it.
 */
export function requestBody(ctx: ParameterizedContext, limit: number): KoaBody | Promise<KoaBody> {
  const { req } = ctx;
  const request = ctx.request as typeof ctx.request & KoaRequestBody;
  const contentType = req.headers['content-type'];
  const json = contentType !== undefined && isJsonMediaType(contentType);
  if (request.body !== undefined || request.rawBody !== undefined || req.readableEnded || (req.complete && !req.readable)) {
    const raw = request.rawBody;
    if (Buffer.isBuffer(raw)) return { body: checkLimit(raw, limit) };
    if (typeof raw === 'string') return { body: checkLimit(Buffer.from(raw), limit) };
    const parsed = request.body;
    if (parsed === undefined) {
      throw new BodyNotKeptError('idemkit: the request body was read before the idempotency middleware and not kept (set ctx.request.body or ctx.request.rawBody)');
    }
    // Without the bytes, a parsed JSON number has lost the digits a double cannot hold
    // (docs/semantics.md, "The fingerprint").
    if (json) return { body: EMPTY, parsedJson: { value: parsed } };
    if (Buffer.isBuffer(parsed) || typeof parsed === 'string') return { body: checkLimit(Buffer.isBuffer(parsed) ? parsed : Buffer.from(parsed), limit) };
    // A form parser's object, say: the fingerprint encodes the value.
    return { body: EMPTY, parsedJson: { value: parsed } };
  }
  return readLimited(req, limit).then((raw): KoaBody => {
    request.rawBody = raw;
    if (raw.byteLength === 0) return { body: raw };
    // A JSON body that does not parse throws a 400 (`expose`): Koa answers it, nothing is claimed.
    const parsed = parseBody(raw, contentType, json);
    request.body = parsed;
    return json ? { body: raw, parsedJson: { value: parsed } } : { body: raw };
  });
}
