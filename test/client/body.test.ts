/** The same key and the same bytes on every attempt; bodies that cannot be replayed are refused before sending. */
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { BodyNotReplayableError, InvalidKeyError, InvalidOptionError, createIdempotentFetch } from '../../src/client/index.js';
import type { ScriptedServer } from './servers.js';
import { scriptedServer } from './servers.js';

let server: ScriptedServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const fast = { minTimeout: 5, maxTimeout: 10, retryBudget: false } as const;
/** Fails the first two attempts with a retryable status, then answers 200. */
const flaky = () => scriptedServer((n) => (n < 2 ? { status: n === 0 ? 500 : 503 } : { status: 200 }));

function bytes(size: number): Uint8Array<ArrayBuffer> {
  return Uint8Array.from({ length: size }, (_, i) => (i * 31 + 7) & 255);
}

function expectIdenticalAttempts(s: ScriptedServer, attempts = 3): void {
  expect(s.seen).toHaveLength(attempts);
  const [first, ...rest] = s.seen;
  for (const attempt of rest) {
    expect(attempt.headers['idempotency-key']).toBe(first!.headers['idempotency-key']);
    expect(attempt.headers['content-type']).toBe(first!.headers['content-type']);
    expect(Buffer.compare(attempt.body, first!.body)).toBe(0);
  }
}

describe('same key, same bytes', () => {
  it('a JSON string body', async () => {
    server = await flaky();
    const body = JSON.stringify({ amount: 1200, currency: 'EUR', note: 'ünïcödé' });
    const response = await createIdempotentFetch(fast)(server.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    expect(response.idempotency.attempts).toBe(3);
    expectIdenticalAttempts(server);
    expect(server.seen[0]!.body.toString()).toBe(body);
  });

  it('bytes the caller mutates after the call starts are still sent as they were', async () => {
    server = await flaky();
    const body = bytes(64);
    const call = createIdempotentFetch(fast)(server.url, { method: 'PATCH', body });
    body.fill(0);
    await call;
    expectIdenticalAttempts(server);
    expect(new Uint8Array(server.seen[2]!.body)).toEqual(bytes(64));
  });

  it('FormData is serialised once: the multipart boundary is the same on every attempt', async () => {
    server = await flaky();
    const form = new FormData();
    form.set('amount', '1200');
    form.set('file', new Blob([bytes(100)]), 'receipt.bin');
    await createIdempotentFetch(fast)(server.url, { method: 'POST', body: form });
    expectIdenticalAttempts(server);
    expect(server.seen[0]!.headers['content-type']).toMatch(/^multipart\/form-data; boundary=/);
  });

  it.each([
    ['a ReadableStream', () => new Blob([bytes(3000)]).stream()],
    ['a Node Readable', () => Readable.from([Buffer.from(bytes(1000)), Buffer.from(bytes(2000))])],
    ['an async generator', () => (async function* () { yield bytes(1000); yield bytes(2000); })()],
  ])('%s is buffered once and replayed byte for byte', async (_name, make) => {
    server = await flaky();
    const response = await createIdempotentFetch(fast)(server.url, { method: 'POST', body: make() });
    expect(response.status).toBe(200);
    expectIdenticalAttempts(server);
    expect(server.seen[0]!.body.byteLength).toBe(3000);
  });

  it('a Request input: its body, headers and key are reused', async () => {
    server = await flaky();
    const request = new Request(server.url, { method: 'POST', body: 'from a Request', headers: { 'idempotency-key': 'req-1', 'x-trace': 't' } });
    const response = await createIdempotentFetch(fast)(request);
    expect(response.idempotency.key).toBe('req-1');
    expectIdenticalAttempts(server);
    expect(server.seen[2]!.headers['x-trace']).toBe('t');
    expect(server.seen[2]!.body.toString()).toBe('from a Request');
  });
});

describe('the key', () => {
  it('one new UUID per call', async () => {
    server = await scriptedServer(() => ({ status: 200 }));
    const client = createIdempotentFetch(fast);
    const a = await client(server.url, { method: 'POST' });
    const b = await client(server.url, { method: 'POST' });
    expect(a.idempotency.key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(b.idempotency.key).not.toBe(a.idempotency.key);
    expect(server.seen.map((s) => s.headers['idempotency-key'])).toEqual([a.idempotency.key, b.idempotency.key]);
  });

  it('the caller\'s key: from the header, or from `idempotencyKey`; both must agree', async () => {
    server = await flaky();
    const client = createIdempotentFetch(fast);
    const response = await client(server.url, { method: 'POST', idempotencyKey: 'order-7-capture' });
    expect(response.idempotency.key).toBe('order-7-capture');
    expect(server.seen.map((s) => s.headers['idempotency-key'])).toEqual(Array(3).fill('order-7-capture'));

    const same = await client(server.url, { method: 'POST', headers: { 'Idempotency-Key': 'k1' }, idempotencyKey: 'k1' });
    expect(same.idempotency.key).toBe('k1');
    const conflict = await client(server.url, { method: 'POST', headers: { 'Idempotency-Key': 'k1' }, idempotencyKey: 'k2' }).catch((e: unknown) => e);
    expect(conflict).toBeInstanceOf(InvalidOptionError);
    expect((conflict as InvalidOptionError).option).toBe('idempotencyKey');
  });

  it('a custom `header` carries the key', async () => {
    server = await scriptedServer(() => ({ status: 200 }));
    const response = await createIdempotentFetch({ ...fast, header: 'X-Request-Key' })(server.url, { method: 'POST' });
    expect(server.seen[0]!.headers['x-request-key']).toBe(response.idempotency.key);
    expect(server.seen[0]!.headers['idempotency-key']).toBeUndefined();
  });

  it('a malformed key of the caller is refused before sending', async () => {
    server = await scriptedServer(() => ({ status: 200 }));
    const error = await createIdempotentFetch(fast)(server.url, { method: 'POST', idempotencyKey: 'has spaces' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidKeyError);
    expect(server.seen).toHaveLength(0);
  });
});

describe('refused before the first attempt', () => {
  it('a stream over maxBodyBytes: BodyNotReplayableError, and nothing reaches the server', async () => {
    server = await scriptedServer(() => ({ status: 200 }));
    const client = createIdempotentFetch({ ...fast, maxBodyBytes: 1024 });
    const error = await client(server.url, { method: 'POST', body: Readable.from([Buffer.from(bytes(1000)), Buffer.from(bytes(1000))]) }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BodyNotReplayableError);
    expect(error).toMatchObject({ code: 'ERR_IDEMKIT_BODY_NOT_REPLAYABLE' });
    expect((error as Error).message).toMatch(/maxBodyBytes.*1024/);
    // A request of our own, answered after everything sent before it: the server saw only that one.
    expect(await seenThrough(server)).toEqual(['GET /after']);
  });

  it('an in-memory body over maxBodyBytes is replayable and is sent', async () => {
    server = await scriptedServer(() => ({ status: 200 }));
    await createIdempotentFetch({ ...fast, maxBodyBytes: 10 })(server.url, { method: 'POST', body: 'more than ten bytes' });
    expect(server.seen).toHaveLength(1);
  });

  it('a Request whose body was already read', async () => {
    server = await scriptedServer(() => ({ status: 200 }));
    const request = new Request(server.url, { method: 'POST', body: 'once' });
    await request.text();
    const error = await createIdempotentFetch(fast)(request).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BodyNotReplayableError);
    expect(server.seen).toHaveLength(0);
  });

  it('a locked stream', async () => {
    server = await scriptedServer(() => ({ status: 200 }));
    const stream = new Blob(['x']).stream();
    stream.getReader();
    const error = await createIdempotentFetch(fast)(server.url, { method: 'POST', body: stream }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BodyNotReplayableError);
    expect(server.seen).toHaveLength(0);
  });

  it('a stream that fails while it is buffered', async () => {
    server = await scriptedServer(() => ({ status: 200 }));
    const failing = (async function* () {
      yield bytes(10);
      throw new Error('disk read failed');
    })();
    const error = await createIdempotentFetch(fast)(server.url, { method: 'POST', body: failing }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BodyNotReplayableError);
    expect(server.seen).toHaveLength(0);
  });
});

/**
 * What the server received, read after a round trip of its own (`GET /after`): a request the call
 * under test had sent would have arrived before that answer (a fixed pause only hoped so).
 */
async function seenThrough(server: ScriptedServer): Promise<string[]> {
  const after = await fetch(`${server.url}/after`);
  await after.arrayBuffer();
  return server.seen.map((s) => `${s.method} ${s.url}`);
}
