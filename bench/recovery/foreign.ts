/**
 * The foreign payment service: deduplicates on the Idempotency-Key as Stripe does (the first
 * request with a key creates a charge, a repeat gets the same charge back), and records every
 * charge by the order id in the request's body, so a second charge of one order under another key
 * is counted. It runs in the driver process: killing the worker cannot reset its counts.
 * (test/patterns/foreign-service.ts counts by key only, with no order id and no latency.)
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface PaymentService {
  readonly url: string;
  /** The charges created for each order id, in order. More than one is a double charge. */
  readonly charges: Map<string, string[]>;
  /** Requests per order id, repeats under the same key included. */
  readonly calls: Map<string, number>;
  close(): Promise<void>;
}

/** `latencyMs`: how long each answer takes, as a real provider's would; the charge is made on arrival. */
export async function startPaymentService(latencyMs: number): Promise<PaymentService> {
  const charges = new Map<string, string[]>();
  const calls = new Map<string, number>();
  const byKey = new Map<string, string>();
  let next = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const key = req.headers['idempotency-key'];
      let orderId: unknown;
      try {
        orderId = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { orderId?: unknown }).orderId;
      } catch {
        orderId = undefined;
      }
      if (req.method !== 'POST' || req.url !== '/charges' || typeof key !== 'string' || key === '' || typeof orderId !== 'string') {
        res.writeHead(400).end();
        return;
      }
      calls.set(orderId, (calls.get(orderId) ?? 0) + 1);
      let id = byKey.get(key);
      if (id === undefined) {
        // Decided synchronously on arrival: a worker killed while waiting for the answer has charged.
        id = `ch_${++next}`;
        byKey.set(key, id);
        const list = charges.get(orderId) ?? [];
        list.push(id);
        charges.set(orderId, list);
      }
      const body = JSON.stringify({ id });
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end(body), latencyMs);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    charges,
    calls,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
