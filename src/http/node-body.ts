import type { IncomingMessage } from 'node:http';
import { BodyTooLargeError, RequestAbortedError } from '../core/errors.js';

/*
 * Reading a Node request body for the fingerprint, shared by the adapters whose framework leaves
 * the body unread (Express without a body parser, Koa): within the limit, and parsed the way the
 * usual body parsers parse it, so that the route finds what it would have found.
 */

/** The bytes, or `BodyTooLargeError` past `limit`. */
export function checkLimit(bytes: Buffer, limit: number): Buffer {
  if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
  return bytes;
}

/**
 * A body as the usual parsers give it: JSON parsed (refused with a 400 error, as body-parser and
 * co-body refuse it, when it does not parse), text/* as a string, anything else as its bytes.
 */
export function parseBody(raw: Buffer, contentType: string | undefined, json: boolean): unknown {
  if (json) {
    try {
      return JSON.parse(raw.toString('utf8'));
    } catch (cause) {
      // What express.json() (or Koa's co-body) would have answered: a 400 through the error handling, before any claim.
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

/** Reads a Node request to its end, refusing it (`BodyTooLargeError`) once past `limit`. */
export function readLimited(req: IncomingMessage, limit: number): Promise<Buffer> {
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
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
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
    const aborted = (cause?: unknown) => new RequestAbortedError('idemkit: the client aborted the request before its body was read', { cause });
    const onClose = () => settle(aborted());
    // Node reports a client that hung up mid-body as an `aborted` ECONNRESET error before `close`.
    const onError = (error: Error & { code?: string }) => settle(error.code === 'ECONNRESET' ? aborted(error) : error);
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
  });
}
