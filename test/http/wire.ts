/**
 * HTTP/1.1 framing, checked on the wire: two requests on one keep-alive connection, each response
 * cut exactly where its own head says it ends (Content-Length or chunked). A response that sends
 * more bytes than it declares leaks them into the next one, and the next one then does not start
 * where the first ends; one that sends fewer never completes.
 */
import { connect } from 'node:net';

export interface WireRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body?: string;
}

export interface WireResponse {
  readonly status: number;
  /** Lower-cased names; a repeated header keeps its last value. */
  readonly headers: Readonly<Record<string, string>>;
  /** The body as framed by the response's own head (chunked transfer decoded). */
  readonly body: Buffer;
  /** How the head said the body ends. */
  readonly framing: 'content-length' | 'chunked';
}

const CRLF = Buffer.from('\r\n');

function serialize(request: WireRequest, close: boolean): Buffer {
  const body = Buffer.from(request.body ?? '');
  const lines = [`${request.method} ${request.path} HTTP/1.1`, 'host: 127.0.0.1'];
  for (const [name, value] of Object.entries(request.headers)) lines.push(`${name}: ${value}`);
  lines.push(`content-length: ${body.byteLength}`, `connection: ${close ? 'close' : 'keep-alive'}`);
  return Buffer.concat([Buffer.from(lines.join('\r\n') + '\r\n\r\n'), body]);
}

/**
 * Parses one response at the start of `buffer`. Returns undefined while it is incomplete, or the
 * response and the number of bytes it took. Throws when the bytes are not a response head.
 */
export function parseResponse(buffer: Buffer): { response: WireResponse; length: number } | undefined {
  const headEnd = buffer.indexOf('\r\n\r\n');
  if (headEnd < 0) {
    if (buffer.byteLength >= 5 && !buffer.subarray(0, 5).equals(Buffer.from('HTTP/'))) throw new Error(`not a response head: ${JSON.stringify(buffer.subarray(0, 40).toString('latin1'))}`);
    return undefined;
  }
  const [statusLine, ...headerLines] = buffer.subarray(0, headEnd).toString('latin1').split('\r\n');
  const status = /^HTTP\/1\.1 (\d{3})/.exec(statusLine ?? '');
  if (!status) throw new Error(`not a response head: ${JSON.stringify(statusLine)}`);
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let offset = headEnd + 4;
  if (headers['transfer-encoding']?.toLowerCase() === 'chunked') {
    const chunks: Buffer[] = [];
    for (;;) {
      const lineEnd = buffer.indexOf(CRLF, offset);
      if (lineEnd < 0) return undefined;
      const size = Number.parseInt(buffer.subarray(offset, lineEnd).toString('latin1'), 16);
      if (!Number.isFinite(size)) throw new Error('bad chunk size');
      offset = lineEnd + 2;
      if (size === 0) {
        // No trailers are expected: the last chunk is followed by an empty line.
        if (buffer.byteLength < offset + 2) return undefined;
        if (!buffer.subarray(offset, offset + 2).equals(CRLF)) throw new Error('trailers after the last chunk');
        return { response: { status: Number(status[1]), headers, body: Buffer.concat(chunks), framing: 'chunked' }, length: offset + 2 };
      }
      if (buffer.byteLength < offset + size + 2) return undefined;
      chunks.push(buffer.subarray(offset, offset + size));
      offset += size + 2;
    }
  }
  const declared = Number(headers['content-length'] ?? 0);
  if (buffer.byteLength < offset + declared) return undefined;
  return { response: { status: Number(status[1]), headers, body: buffer.subarray(offset, offset + declared), framing: 'content-length' }, length: offset + declared };
}

/**
 * Sends `first` on a new keep-alive connection; once its response is complete by its own framing,
 * sends `second` on the same connection (with `Connection: close`) and reads to the end of the
 * connection. Rejects unless the second response starts exactly where the first one ends and the
 * connection carries nothing after it.
 */
export function twoOnOneConnection(url: string, first: WireRequest, second: WireRequest): Promise<[WireResponse, WireResponse]> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let received = Buffer.alloc(0);
    let firstDone: { response: WireResponse; length: number } | undefined;
    const fail = (error: Error) => {
      socket.destroy();
      reject(error);
    };
    socket.on('error', fail);
    socket.on('connect', () => socket.write(serialize(first, false)));
    socket.on('data', (data: Buffer) => {
      received = Buffer.concat([received, data]);
      if (firstDone !== undefined) return;
      try {
        firstDone = parseResponse(received);
      } catch (error) {
        return fail(error as Error);
      }
      if (firstDone !== undefined) socket.write(serialize(second, true));
    });
    socket.on('end', () => {
      if (firstDone === undefined) {
        return fail(new Error(`the connection ended before the first response was complete (${received.byteLength} bytes: ${JSON.stringify(received.toString('latin1').slice(0, 200))})`));
      }
      const rest = received.subarray(firstDone.length);
      let secondDone;
      try {
        secondDone = parseResponse(rest);
      } catch (error) {
        // Bytes the first response sent beyond its declared length sit where the second should start.
        return fail(new Error(`the second response does not start where the first one ends: ${(error as Error).message}`));
      }
      if (secondDone === undefined) return fail(new Error('the connection ended before the second response was complete'));
      if (secondDone.length !== rest.byteLength) return fail(new Error(`${rest.byteLength - secondDone.length} bytes follow the second response`));
      socket.destroy();
      resolve([firstDone.response, secondDone.response]);
    });
  });
}
