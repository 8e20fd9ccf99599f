import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { responseLength, runPaced } from '../../bench/paced.js';

describe('bench paced sender: finding the end of an answer', () => {
  const answer = (head: string, body = '') => Buffer.from(`HTTP/1.1 201 Created\r\n${head}\r\n${body}`);

  it('reads Content-Length in any letter case', () => {
    const whole = answer('content-type: application/json\r\nCONTENT-LENGTH: 11\r\n', '{"ok":true}');
    expect(responseLength(whole)).toBe(whole.length);
  });

  it('waits for the rest of a body or of the head', () => {
    const whole = answer('Content-Length: 11\r\n', '{"ok":true}');
    expect(responseLength(whole.subarray(0, whole.length - 1))).toBe(-1);
    expect(responseLength(whole.subarray(0, 20))).toBe(-1);
  });

  it('finds the last chunk of a chunked body', () => {
    const whole = answer('Transfer-Encoding: chunked\r\n', 'b\r\n{"ok":true}\r\n0\r\n\r\n');
    expect(responseLength(whole)).toBe(whole.length);
    expect(responseLength(whole.subarray(0, whole.length - 2))).toBe(-1);
  });

  it('takes an answer without a body length as ending with its head', () => {
    const whole = answer('Date: now\r\n');
    expect(responseLength(whole)).toBe(whole.length);
  });
});

describe('bench paced sender: against a server', () => {
  const closers: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
  });

  async function serve(status: number, chunked: boolean): Promise<{ url: string; seen: string[] }> {
    const seen: string[] = [];
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        seen.push(String(req.headers['idempotency-key']));
        res.statusCode = status;
        if (chunked) res.write('{"ok":');
        res.end('true}');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    closers.push(() => new Promise((resolve) => server.close(() => resolve())));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/charges`, seen };
  }

  it('sends every scheduled request with a fresh key, and measures each', async () => {
    const { url, seen } = await serve(201, false);
    const sample = await runPaced({ url }, 'new-key', 400, 0.5);
    expect(sample.completed).toBe(200);
    expect(sample.errors).toBe(0);
    expect(sample.non2xx).toBe(0);
    expect(new Set(seen).size).toBe(200);
    expect(sample.p50Micros).toBeGreaterThan(0);
    expect(sample.p99Micros).toBeGreaterThanOrEqual(sample.p50Micros);
  });

  it('counts answers outside 2xx, chunked ones included', async () => {
    const { url } = await serve(500, true);
    const sample = await runPaced({ url }, 'replay', 200, 0.25);
    expect(sample.completed).toBe(50);
    expect(sample.non2xx).toBe(50);
  });

  it('counts requests to a closed port as errors, and ends', async () => {
    const closed = await serve(201, false);
    await closers.pop()!();
    const sample = await runPaced({ url: closed.url }, 'new-key', 100, 0.2);
    expect(sample.completed).toBe(0);
    expect(sample.errors).toBe(20);
  });
});
