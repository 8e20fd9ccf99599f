/**
 * The recovery bench's own parts that decide its verdicts, without PostgreSQL or DBOS: the line
 * counter behind "user code lines", the payment service that counts double charges, and the
 * client's retries across a dead worker.
 */
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { placeOrder } from '../../bench/recovery/client.js';
import { startPaymentService } from '../../bench/recovery/foreign.js';
import type { PaymentService } from '../../bench/recovery/foreign.js';
import { codeLines } from '../../bench/recovery/lines.js';
import { freePort } from '../support/ports.js';

describe('codeLines', () => {
  it('counts lines with code, not blank lines or comments', () => {
    const source = ['/**', ' * A doc comment.', ' */', 'import x from "y";', '', '// a comment', 'const a = 1; // trailing', '  /* inline */ const b = 2;', '/* one', 'two */', '   '].join('\n');
    expect(codeLines(source)).toBe(3);
  });

  it('does not take // or /* inside strings and templates for comments', () => {
    const source = ['const url = `http://${host}/charges`;', "const s = '// not a comment';", 'const t = "/* nor this */";', '`line one', '// inside a template', '`;'].join('\n');
    expect(codeLines(source)).toBe(6);
  });

  it('returns to code after a template expression holding braces', () => {
    const source = ['const t = `${f({ a: 1 })} done`;', '// a comment after it', 'const u = 2;'].join('\n');
    expect(codeLines(source)).toBe(2);
  });
});

describe('the payment service', () => {
  let service: PaymentService | undefined;
  afterEach(async () => {
    await service?.close();
    service = undefined;
  });

  const charge = async (key: string, orderId: string) => {
    const response = await fetch(`${service!.url}/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ orderId, amount: 100 }),
    });
    return ((await response.json()) as { id: string }).id;
  };

  it('replays a repeated key and counts a second key for one order as a second charge', async () => {
    service = await startPaymentService(0);
    const first = await charge('k1', 'o1');
    expect(await charge('k1', 'o1')).toBe(first);
    expect(service.charges.get('o1')).toEqual([first]);
    expect(service.calls.get('o1')).toBe(2);
    const second = await charge('k2', 'o1');
    expect(second).not.toBe(first);
    expect(service.charges.get('o1')).toEqual([first, second]);
  });
});

describe('placeOrder', () => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    server = undefined;
  });

  it('retries 409 and 503 with the same key until the order is answered', async () => {
    const keys: string[] = [];
    const answers = [409, 503, 201];
    server = createServer((req, res) => {
      keys.push(String(req.headers['idempotency-key']));
      const status = answers.shift()!;
      req.resume();
      res.writeHead(status, { 'content-type': 'application/json' }).end(status === 201 ? JSON.stringify({ orderId: 'o1', chargeId: 'ch_1' }) : JSON.stringify({ retryAfterMs: 1 }));
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const outcome = await placeOrder(`http://127.0.0.1:${port}`, { orderId: 'o1', amount: 1 }, Date.now() + 10_000);
    expect(outcome.answer).toEqual({ orderId: 'o1', chargeId: 'ch_1' });
    expect(outcome.attempts).toBe(3);
    expect(keys).toEqual(['o1', 'o1', 'o1']);
  });

  it('retries a refused connection until the worker serves again', async () => {
    const port = await freePort();
    let requests = 0;
    const placing = placeOrder(`http://127.0.0.1:${port}`, { orderId: 'o2', amount: 1 }, Date.now() + 20_000);
    // The worker comes back once the client has been refused at least once.
    await new Promise((resolve) => setTimeout(resolve, 150));
    server = createServer((req, res) => {
      requests++;
      req.resume();
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ orderId: 'o2', chargeId: 'ch_2' }));
    });
    await new Promise<void>((resolve) => server!.listen(port, '127.0.0.1', resolve));
    const outcome = await placing;
    expect(outcome.answer).toEqual({ orderId: 'o2', chargeId: 'ch_2' });
    expect(requests).toBe(1);
    expect(outcome.attempts).toBeGreaterThan(1);
  });

  it('gives up at the deadline and says why', async () => {
    const port = await freePort();
    const outcome = await placeOrder(`http://127.0.0.1:${port}`, { orderId: 'o3', amount: 1 }, Date.now() + 200);
    expect(outcome.answer).toBeUndefined();
    expect(outcome.lastError).toBe('ECONNREFUSED');
  });

  it('does not retry an answer a retry cannot change (422)', async () => {
    let requests = 0;
    server = createServer((req, res) => {
      requests++;
      req.resume();
      res.writeHead(422).end('mismatch');
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const outcome = await placeOrder(`http://127.0.0.1:${port}`, { orderId: 'o4', amount: 1 }, Date.now() + 10_000);
    expect(outcome.answer).toBeUndefined();
    expect(requests).toBe(1);
    expect(outcome.lastError).toBe('422 mismatch');
  });
});
