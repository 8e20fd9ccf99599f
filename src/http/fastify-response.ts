import { isUtf8 } from 'node:buffer';
import type { FastifyReply } from 'fastify';

/**
 * The bytes of what a Fastify route answers (its onSend payload, whatever form it takes), and a
 * replay in the form Node writes fastest. The plugin's flow is in fastify.ts.
 */

const EMPTY = Buffer.alloc(0);

/**
 * A replay body in the form Node writes fastest: UTF-8 text as a string, which goes out in one
 * write together with the headers (a Buffer costs a second, vectored write), other bytes as a Buffer.
 */
export function sendable(body: Uint8Array): string | Buffer | undefined {
  if (body.byteLength === 0) return undefined;
  const buffer = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  return isUtf8(buffer) ? buffer.toString('utf8') : buffer;
}

/** The bytes of a string, Buffer or empty payload; undefined for a stream or a fetch Response. */
export function plainBytes(payload: unknown): Buffer | undefined {
  if (payload === null || payload === undefined) return EMPTY;
  if (typeof payload === 'string') return Buffer.from(payload);
  if (payload instanceof Uint8Array) return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  return undefined;
}

/** A fetch `Response` sent through Fastify: apply its status and headers, keep its body. */
function unwrapResponse(reply: FastifyReply, payload: unknown): unknown {
  if (payload === null || typeof payload !== 'object' || Object.prototype.toString.call(payload) !== '[object Response]') return payload;
  const response = payload as Response;
  reply.code(response.status);
  for (const [name, value] of response.headers) reply.header(name, value);
  return response.body;
}

/**
 * The bytes of an onSend payload that is not plain bytes: a fetch Response (its status and headers
 * applied) or a stream, read to its end.
 */
export async function readPayload(reply: FastifyReply, payload: unknown): Promise<Buffer> {
  const body = unwrapResponse(reply, payload);
  const plain = plainBytes(body);
  if (plain !== undefined) return plain;
  if (typeof body === 'object' && body !== null && Symbol.asyncIterator in body) {
    const chunks: Buffer[] = [];
    for await (const chunk of body as AsyncIterable<Uint8Array | string>) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
    return Buffer.concat(chunks);
  }
  throw new TypeError(`idemkit: cannot store a response payload of type ${typeof body}`);
}
