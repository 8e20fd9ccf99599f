// A small HTTP/1.1 client on node:http: it must send what fetch refuses to (a repeated header,
// a Latin-1 byte in a header, a request held one byte short of complete for the race barrier).
import http from 'node:http';
import https from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import { CheckRequestError } from './errors.js';

export interface HttpRequest {
  readonly method: string;
  readonly url: URL;
  /** Header values by name; an array sends the header once per value. */
  readonly headers: Readonly<Record<string, string | readonly string[]>>;
  readonly body?: string | Buffer | undefined;
}

export interface HttpAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  /** performance.now() when the request started and when its answer was complete. */
  readonly startedAt: number;
  readonly finishedAt: number;
}

export interface SendOptions {
  readonly timeoutMs: number;
  readonly agent?: http.Agent | undefined;
  /** Hold the last body byte back until `release` (the race barrier). @default true */
  readonly hold?: boolean;
  /** Send `Expect: 100-continue`; `continued` resolves when the server's 100 arrives. */
  readonly expectContinue?: boolean;
  /**
   * The largest answer body read. A larger declared Content-Length fails at once; a body that
   * grows past it fails as it passes it, and the connection is destroyed so nothing more is read.
   */
  readonly maxResponseBytes: number;
}

/**
 * Sends one request and reads the whole answer, or rejects with a CheckRequestError within
 * timeoutMs (or as soon as the answer is over maxResponseBytes).
 */
export async function send(request: HttpRequest, options: SendOptions): Promise<HttpAnswer> {
  const held = open(request, options);
  void held.release();
  try {
    return await held.answer;
  } catch (error) {
    // A kept-alive socket the server closed while idle: the request never reached it (node's
    // documented case for one retry).
    if (!(error instanceof StaleSocketError)) throw error;
    const again = open(request, options);
    void again.release();
    return again.answer;
  }
}

class StaleSocketError extends CheckRequestError {}

/** A request written up to its last body byte; `release` writes that byte. */
export interface HeldRequest {
  /** Resolves when everything but the last byte reached the socket (or the request already ended). */
  readonly written: Promise<void>;
  readonly answer: Promise<HttpAnswer>;
  /** True when the answer's head arrived before `release` (the server did not wait for the body). */
  readonly early: boolean;
  /**
   * With `expectContinue`: resolves when the server sent `100 Continue`, which it does once it
   * has parsed the head (or when the request ended otherwise; see `gotContinue`).
   */
  readonly continued: Promise<void>;
  readonly gotContinue: boolean;
  /** Writes the last byte; resolves when it reached the socket (or the request ended otherwise). */
  release(): Promise<void>;
}

/**
 * Opens a request and writes it all but its last body byte (an empty body: only the head, which
 * a server may answer at once). The timeout covers the whole exchange, release included.
 */
export function open(request: HttpRequest, options: SendOptions): HeldRequest {
  const body = typeof request.body === 'string' ? Buffer.from(request.body) : (request.body ?? Buffer.alloc(0));
  const client = request.url.protocol === 'https:' ? https : http;
  const startedAt = performance.now();
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(request.headers)) headers[name] = typeof value === 'string' ? value : [...value];
  if (body.length > 0 || !['GET', 'HEAD', 'DELETE', 'OPTIONS'].includes(request.method)) headers['content-length'] = String(body.length);
  if (options.expectContinue) headers.expect = '100-continue';
  let req: http.ClientRequest;
  try {
    req = client.request(request.url, { method: request.method, headers, agent: options.agent ?? false });
  } catch (error) {
    // node refuses some header values itself (a control character): report it as this request's failure
    const failure = new CheckRequestError('protocol', `the request could not be sent: ${(error as Error).message}`, { cause: error });
    return { written: Promise.resolve(), answer: Promise.reject(failure), early: false, continued: Promise.resolve(), gotContinue: false, release: () => Promise.resolve() };
  }
  let timer: NodeJS.Timeout | undefined;
  let released = false;
  let early = false;
  let answered = false;
  let sent: Promise<void> = Promise.resolve();
  let resolveWritten!: () => void;
  const written = new Promise<void>((resolve) => (resolveWritten = resolve));
  let gotContinue = false;
  const continued = new Promise<void>((resolve) => {
    req.once('continue', () => {
      gotContinue = true;
      resolve();
    });
    written.then(() => answer.then(() => resolve(), () => resolve()), () => {});
  });
  const answer = new Promise<HttpAnswer>((resolve, reject) => {
    const fail = (error: CheckRequestError) => {
      clearTimeout(timer);
      resolveWritten();
      req.destroy();
      reject(error);
    };
    timer = setTimeout(
      () => fail(new CheckRequestError('timeout', `no answer within ${options.timeoutMs} ms (${request.method} ${request.url.href})`)),
      options.timeoutMs,
    );
    req.on('error', (error: NodeJS.ErrnoException) => {
      if (req.reusedSocket && error.code === 'ECONNRESET' && !answered) return fail(new StaleSocketError('network', error.message, { cause: error }));
      fail(classify(error, request));
    });
    req.on('response', (res) => {
      answered = true;
      if (!released) early = true;
      resolveWritten();
      const limit = options.maxResponseBytes;
      const status = res.statusCode ?? 0;
      const declared = /^\d+$/.test(res.headers['content-length'] ?? '') ? Number(res.headers['content-length']) : undefined;
      // A HEAD's Content-Length describes the GET's body: nothing follows it.
      if (declared !== undefined && declared > limit && request.method !== 'HEAD') {
        return fail(tooLarge(request, status, limit, `it declares Content-Length ${declared}`));
      }
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > limit) return fail(tooLarge(request, status, limit, `reading stopped after ${size} bytes`));
        chunks.push(chunk);
      });
      res.on('error', (error: NodeJS.ErrnoException) => fail(classify(error, request)));
      res.on('end', () => {
        clearTimeout(timer);
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks).toString('utf8'),
          startedAt,
          finishedAt: performance.now(),
        });
      });
    });
  });
  // A failure before anyone awaits the answer (the race awaits every request's barrier first)
  // must not surface as an unhandled rejection; whoever awaits `answer` still gets it.
  answer.catch(() => {});
  const head = body.subarray(0, Math.max(0, body.length - 1));
  if (options.hold === false) {
    // The whole request in one write; `written` and `release` resolve once it is on the socket.
    released = true;
    sent = new Promise<void>((resolve) => {
      req.end(body, () => resolve());
      answer.then(() => resolve(), () => resolve());
    });
    void sent.then(() => resolveWritten());
  } else if (head.length > 0) {
    req.write(head, () => resolveWritten());
  } else {
    // nothing to hold back but the last byte (or no body at all): the head goes out on connect
    req.flushHeaders();
    req.once('socket', (socket) => (socket.connecting ? socket.once('connect', () => resolveWritten()) : resolveWritten()));
  }
  return {
    written,
    answer,
    get early() {
      return early;
    },
    continued,
    get gotContinue() {
      return gotContinue;
    },
    release() {
      if (!released) {
        released = true;
        sent = new Promise<void>((resolve) => {
          req.end(body.length > 0 ? body.subarray(body.length - 1) : undefined, () => resolve());
          // an error or a timeout ends the request without the callback
          answer.then(() => resolve(), () => resolve());
        });
      }
      return sent;
    },
  };
}

function tooLarge(request: HttpRequest, status: number, limit: number, what: string): CheckRequestError {
  return new CheckRequestError(
    'too-large',
    `the answer (status ${status}) is larger than the response limit of ${limit} bytes (maxResponseBytes, --max-response-bytes): ${what} (${request.method} ${request.url.href})`,
  );
}

function classify(error: NodeJS.ErrnoException, request: HttpRequest): CheckRequestError {
  if (error instanceof CheckRequestError) return error;
  const where = `${request.method} ${request.url.href}`;
  const code = error.code ?? '';
  if (code === 'ECONNREFUSED') return new CheckRequestError('refused', `connection refused (${where}): is the server running?`, { cause: error });
  if (code.startsWith('HPE_') || /parse error/i.test(error.message)) {
    return new CheckRequestError('protocol', `the answer is not HTTP/1.1 (${where}): ${error.message}`, { cause: error });
  }
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return new CheckRequestError('refused', `unknown host (${where}): ${error.message}`, { cause: error });
  return new CheckRequestError('network', `${code || error.name} (${where}): ${error.message}`, { cause: error });
}

/** The first header value (node joins most repeated headers, but not all). */
export function header(answer: HttpAnswer, name: string): string | undefined {
  const value = answer.headers[name.toLowerCase()];
  return Array.isArray(value) ? value[0] : value;
}
