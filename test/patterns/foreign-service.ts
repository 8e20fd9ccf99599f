/**
 * A fake foreign payment API with its own Idempotency-Key deduplication, as Stripe has: the first
 * request with a key creates a charge (an effect), a repeat replays it. It counts effects and
 * requests per key, so a proof can tell "called twice" from "charged twice".
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ForeignService {
  readonly url: string;
  /** Effects (charges created) per idempotency key. */
  readonly effects: Map<string, number>;
  /** Requests per idempotency key, repeats included. */
  readonly requests: Map<string, number>;
  close(): Promise<void>;
}

export async function startForeignService(): Promise<ForeignService> {
  const effects = new Map<string, number>();
  const requests = new Map<string, number>();
  const charges = new Map<string, string>();
  let next = 0;
  const server = createServer((req, res) => {
    const key = req.headers['idempotency-key'];
    req.resume();
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/charges' || typeof key !== 'string' || key === '') {
        res.writeHead(400).end();
        return;
      }
      requests.set(key, (requests.get(key) ?? 0) + 1);
      let body = charges.get(key);
      if (body === undefined) {
        // Decided synchronously: two concurrent requests with one key cannot both create a charge.
        body = JSON.stringify({ id: `ch_${++next}` });
        charges.set(key, body);
        effects.set(key, (effects.get(key) ?? 0) + 1);
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    effects,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
