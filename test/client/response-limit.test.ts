/**
 * maxResponseBytes: the client reads a response body only up to the limit. An endless body is
 * cut off there (its stream cancelled, the connection closed), a declared Content-Length over the
 * limit is refused without reading, and the call rejects with ResponseTooLargeError, which is not
 * retried: the server answered, so the request may have run.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { ResponseTooLargeError, createIdempotentFetch } from '../../src/client/index.js';
import type { TestApp } from '../http/harness.js';
import { listenServer } from '../http/apps/listen.js';
import type { StreamingServer } from './servers.js';
import { streamingServer } from './servers.js';

let server: (TestApp & Partial<StreamingServer>) | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

/**
 * fetch, noting the largest body chunk the runtime hands over: the client may read one chunk past
 * its limit, and how large a chunk is differs by runtime (Node reads a socket 64 KiB at a time;
 * Bun handed over 256 KiB and more here).
 */
function chunkWatchingFetch(): { fetch: typeof fetch; largest: () => number } {
  let largest = 0;
  const watched: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    if (!response.body) return response;
    const body = response.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          largest = Math.max(largest, chunk.byteLength);
          controller.enqueue(chunk);
        },
      }),
    );
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
  return { fetch: watched, largest: () => largest };
}
const post = { method: 'POST', body: '{"amount":1}' };
const noWait = { minTimeout: 0, maxTimeout: 0, retryBudget: false } as const;

describe('an endless response body', () => {
  it('rejects with ResponseTooLargeError after reading at most the limit plus one chunk; the connection is closed; not retried', async () => {
    const streaming = await streamingServer();
    server = streaming;
    const limit = 256 * 1024;
    const watch = chunkWatchingFetch();
    const client = createIdempotentFetch({ ...noWait, retries: 3, maxResponseBytes: limit, fetch: watch.fetch });

    const error = await client(streaming.url, post).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(ResponseTooLargeError);
    const tooLarge = error as ResponseTooLargeError;
    expect(tooLarge).toMatchObject({ code: 'ERR_IDEMKIT_RESPONSE_TOO_LARGE', limit, status: 200, declared: undefined, attempts: 1, url: `${streaming.url}/` });
    expect(tooLarge.key).toMatch(/^[0-9a-f-]{36}$/);
    expect(tooLarge.received).toBeGreaterThan(limit);
    expect(watch.largest()).toBeGreaterThan(0);
    expect(tooLarge.received).toBeLessThanOrEqual(limit + watch.largest());
    // Truthful: names the limit, says the request may have run, and how to retry.
    expect(tooLarge.message).toContain('`maxResponseBytes` (262144 bytes)');
    expect(tooLarge.message).toContain('may have executed');
    expect(tooLarge.message).toContain(`with the same key (${tooLarge.key})`);
    // The client stopped the body: the server saw the connection closed before its safety cap.
    expect(await streaming.ended()).toBe('client');
    expect(streaming.requests()).toBe(1);
  });

  it('the default limit is 10 MiB', async () => {
    const streaming = await streamingServer();
    server = streaming;
    const watch = chunkWatchingFetch();
    const error = await createIdempotentFetch({ retries: 0, fetch: watch.fetch })(streaming.url, post).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResponseTooLargeError);
    expect(error).toMatchObject({ limit: 10 * 1024 * 1024 });
    expect((error as ResponseTooLargeError).received).toBeLessThanOrEqual(10 * 1024 * 1024 + watch.largest());
    expect(await streaming.ended()).toBe('client');
  });

  it('a GET (no key) gets the same typed error, without advice about a key', async () => {
    const streaming = await streamingServer();
    server = streaming;
    const error = await createIdempotentFetch({ ...noWait, maxResponseBytes: 1000 })(streaming.url).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResponseTooLargeError);
    expect(error).toMatchObject({ key: undefined, attempts: 1 });
    expect((error as Error).message).toContain('check its outcome before sending it again');
    expect(streaming.requests()).toBe(1);
  });
});

describe('a declared Content-Length', () => {
  it('over the limit: refused before reading a byte', async () => {
    const limit = 100_000;
    const streaming = await streamingServer({ length: limit + 1 });
    server = streaming;
    const error = await createIdempotentFetch({ ...noWait, maxResponseBytes: limit })(streaming.url, post).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResponseTooLargeError);
    expect(error).toMatchObject({ limit, received: 0, declared: limit + 1, status: 200 });
    expect((error as Error).message).toContain(`it declares Content-Length ${limit + 1}, so nothing was read`);
  });

  it('exactly at the limit: read and returned', async () => {
    const limit = 100_000;
    server = await streamingServer({ length: limit });
    const response = await createIdempotentFetch({ ...noWait, maxResponseBytes: limit })(server.url, post);
    expect((await response.arrayBuffer()).byteLength).toBe(limit);
  });

  it('of a HEAD (the size of the GET\'s body) or of an encoded body (the compressed size) does not count', async () => {
    // 1000 random bytes gzip to more than 1000: the decoded body fits the limit, the wire size does not.
    const plain = randomBytes(1000);
    const gzipped = gzipSync(plain);
    expect(gzipped.length).toBeGreaterThan(1000);
    server = await listenServer(
      createServer((req, res) => {
        if (req.method === 'HEAD') return void res.writeHead(200, { 'content-length': '999999999' }).end();
        res.writeHead(200, { 'content-encoding': 'gzip', 'content-length': String(gzipped.length) }).end(gzipped);
      }),
    );
    const client = createIdempotentFetch({ ...noWait, maxResponseBytes: 1000 });
    expect((await client(server.url, { method: 'HEAD' })).status).toBe(200);
    const response = await client(server.url);
    expect(Buffer.from(await response.arrayBuffer())).toEqual(plain);
  });
});

describe('the option', () => {
  it('is validated when the client is created', () => {
    for (const value of [-1, 1.5, Infinity, '10mb']) {
      expect(() => createIdempotentFetch({ maxResponseBytes: value as number })).toThrow(expect.objectContaining({ option: 'maxResponseBytes' }));
    }
    // node-fetch's name for it points to this one.
    expect(() => createIdempotentFetch({ size: 1 } as never)).toThrow(/`size`: unknown option; use `maxResponseBytes`/);
  });

  it('0 allows only empty bodies', async () => {
    server = await listenServer(createServer((req, res) => void res.writeHead(req.url === '/empty' ? 204 : 200).end(req.url === '/empty' ? undefined : 'x')));
    const client = createIdempotentFetch({ ...noWait, maxResponseBytes: 0 });
    expect((await client(`${server.url}/empty`, post)).status).toBe(204);
    await expect(client(`${server.url}/one`, post)).rejects.toMatchObject({ code: 'ERR_IDEMKIT_RESPONSE_TOO_LARGE', received: 1 });
  });
});
