import { BodyTooLargeError } from './errors.js';

/**
 * Reads a byte stream to its end, or stops once more than `limit` bytes have come (the stream is
 * then cancelled, which closes an HTTP connection): what was read and whether it went over.
 */
export async function readStreamLimited(
  stream: ReadableStream<Uint8Array>,
  limit: number,
): Promise<{ readonly chunks: Uint8Array[]; readonly size: number; readonly over: boolean }> {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { chunks, size, over: false };
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      return { chunks, size, over: true };
    }
    chunks.push(value);
  }
}

/** Joins byte chunks into one array (the one chunk itself when there is only one). */
export function concatBytes(chunks: readonly Uint8Array[], size = chunks.reduce((n, c) => n + c.byteLength, 0)): Uint8Array {
  if (chunks.length === 1 && chunks[0]) return chunks[0];
  const out = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

/** Reads a request body up to `limit` bytes; throws `BodyTooLargeError` past it without reading on. */
export async function readLimited(request: Request, limit: number): Promise<Uint8Array> {
  const declared = Number(request.headers.get('content-length') ?? NaN);
  if (declared > limit) throw new BodyTooLargeError(limit);
  if (!request.body) return new Uint8Array(0);
  const read = await readStreamLimited(request.body, limit);
  if (read.over) throw new BodyTooLargeError(limit);
  return concatBytes(read.chunks, read.size);
}
