/**
 * A simulated payment channel (think Alipay / WeChat Pay / a card acquirer). It runs in the demo
 * process, so it outlives every crash of the service, as a real channel would.
 *
 * - `POST /charges` with its own `Idempotency-Key`: the channel's dedup. The first request with a
 *   key creates a transaction; every later one answers the same transaction. Sometimes (seeded)
 *   it commits the charge and then does not answer in time: the third network failure of the
 *   seed ("the call succeeded, but the response never came back").
 * - After a charge it sends the asynchronous notification to `notifyUrl`, signed with Standard
 *   Webhooks: `immediate` copies at once and concurrently, plus `late` copies held back until the
 *   demo calls `releaseLate()` (after the order shipped). A delivery that fails (connection
 *   refused while the service is down, a 5xx) is retried with backoff, as channels do.
 * - `GET /charges/:key`: the active query a completer uses when a notification never arrived.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { signWebhook } from 'idemkit/messaging';
import { chance, hexId } from './rng.js';

export interface ChannelOptions {
  readonly seed: string;
  /** Standard Webhooks secret (`whsec_…`) shared with the service. */
  readonly secret: string;
  /** Share of new charges that commit and then answer too late (seeded per key; the first one always). @default 0.2 */
  readonly lateAnswerRate?: number;
  /** How long a late answer is held before the socket is dropped, in ms. @default 800 */
  readonly lateAnswerMs?: number;
  /** Notifications sent at once, concurrently. @default 2 */
  readonly immediate?: number;
  /** Notifications held until `releaseLate()`. @default 1 */
  readonly late?: number;
  /** @default 0 (any free port) */
  readonly port?: number;
}

interface Charge {
  readonly txnId: string;
  readonly key: string;
  readonly orderId: string;
  readonly amount: number;
  readonly notifyUrl: string;
  readonly body: string;
}

export interface ChannelStats {
  /** Distinct transactions: money actually moved. */
  charges: number;
  /** Charge requests received (retries included). */
  chargeRequests: number;
  /** Charges whose answer was held back until the caller gave up. */
  lateAnswers: number;
  /** Notifications scheduled (each copy counts) and HTTP attempts made to deliver them. */
  notifications: number;
  notificationAttempts: number;
  /** Copies that ended with a 2xx answer. */
  notificationsAcknowledged: number;
  /** Charges per order id beyond the first: a double charge. Must stay 0. */
  doubleCharges: number;
}

export interface Channel {
  readonly url: string;
  stats(): ChannelStats;
  /** Charges made for one order (more than 1 is a double charge). */
  chargesFor(orderId: string): number;
  /** Charge requests received with one channel key. */
  requestsFor(key: string): number;
  /** Sends the held-back copies now (the "late" resend). */
  releaseLate(): void;
  /** Resolves when no notification is waiting or being retried. */
  idle(timeoutMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

export async function startChannel(options: ChannelOptions): Promise<Channel> {
  const lateAnswerRate = options.lateAnswerRate ?? 0.2;
  const lateAnswerMs = options.lateAnswerMs ?? 800;
  const immediate = options.immediate ?? 2;
  const late = options.late ?? 1;
  const byKey = new Map<string, Charge>();
  const byOrder = new Map<string, number>();
  const held: Array<() => void> = [];
  const stats: ChannelStats = {
    charges: 0,
    chargeRequests: 0,
    lateAnswers: 0,
    notifications: 0,
    notificationAttempts: 0,
    notificationsAcknowledged: 0,
    doubleCharges: 0,
  };
  let pending = 0;
  let closed = false;
  const timers = new Set<NodeJS.Timeout>();
  const later = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        timers.delete(timer);
        resolve();
      }, ms);
      timers.add(timer);
    });

  /** One notification copy: retried until acknowledged (bounded), as a real channel does. */
  async function notify(charge: Charge, copy: number): Promise<void> {
    pending++;
    try {
      // One event id for every copy: a resend is the same event (Standard Webhooks `webhook-id`).
      const id = `evt_${charge.txnId}`;
      const payload = JSON.stringify({ type: 'charge.succeeded', txnId: charge.txnId, orderId: charge.orderId, amount: charge.amount });
      for (let attempt = 0; attempt < 200 && !closed; attempt++) {
        stats.notificationAttempts++;
        const timestamp = Math.floor(Date.now() / 1000);
        try {
          const response = await fetch(charge.notifyUrl, {
            method: 'POST',
            headers: {
              'content-type': 'application/json',
              'webhook-id': id,
              'webhook-timestamp': String(timestamp),
              'webhook-signature': signWebhook(options.secret, id, timestamp, payload),
              'x-notification-copy': String(copy),
            },
            body: payload,
            signal: AbortSignal.timeout(5_000),
          });
          await response.arrayBuffer();
          if (response.ok) {
            stats.notificationsAcknowledged++;
            return;
          }
        } catch {
          // refused, reset or timed out: the service may be restarting
        }
        await later(Math.min(1_000, 50 * 2 ** Math.min(attempt, 5)));
      }
    } finally {
      pending--;
    }
  }

  function schedule(charge: Charge): void {
    for (let copy = 0; copy < immediate; copy++) {
      stats.notifications++;
      void later(5).then(() => notify(charge, copy));
    }
    for (let copy = 0; copy < late; copy++) {
      stats.notifications++;
      pending++; // a held copy counts as pending: the channel is not idle until it was sent
      held.push(() => {
        pending--;
        void notify(charge, immediate + copy);
      });
    }
  }

  const requestsByKey = new Map<string, number>();

  async function charge(request: IncomingMessage, response: ServerResponse, body: string): Promise<void> {
    stats.chargeRequests++;
    const key = request.headers['idempotency-key'];
    if (typeof key !== 'string' || key === '') return send(response, 400, { error: 'Idempotency-Key required' });
    requestsByKey.set(key, (requestsByKey.get(key) ?? 0) + 1);
    const existing = byKey.get(key);
    if (existing) {
      if (existing.body !== body) return send(response, 422, { error: 'Idempotency-Key reused with a different request' });
      return send(response, 200, { txnId: existing.txnId, status: 'SUCCESS' });
    }
    let fields: { orderId?: unknown; amount?: unknown; notifyUrl?: unknown };
    try {
      fields = JSON.parse(body) as typeof fields;
    } catch {
      return send(response, 400, { error: 'invalid JSON' });
    }
    const { orderId, amount, notifyUrl } = fields;
    if (typeof orderId !== 'string' || typeof amount !== 'number' || !(amount > 0) || typeof notifyUrl !== 'string') {
      return send(response, 400, { error: 'orderId, amount > 0 and notifyUrl are required' });
    }
    const created: Charge = { txnId: `ch_${hexId(options.seed, 8, key)}`, key, orderId, amount, notifyUrl, body };
    byKey.set(key, created);
    stats.charges++;
    const perOrder = (byOrder.get(orderId) ?? 0) + 1;
    byOrder.set(orderId, perOrder);
    if (perOrder > 1) stats.doubleCharges++;
    schedule(created);
    // The first charge always answers late, so even a tiny run shows the case.
    if (stats.charges === 1 || chance(options.seed, 'late-answer', key) < lateAnswerRate) {
      // Committed, but the answer is lost: hold it past the caller's timeout, then drop the socket.
      stats.lateAnswers++;
      await later(lateAnswerMs);
      response.destroy();
      return;
    }
    send(response, 200, { txnId: created.txnId, status: 'SUCCESS' });
  }

  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      if (request.method === 'POST' && request.url === '/charges') return void charge(request, response, body);
      const query = /^\/charges\/([^/?]+)$/.exec(request.url ?? '');
      if (request.method === 'GET' && query) {
        const found = byKey.get(decodeURIComponent(query[1]!));
        return found ? send(response, 200, { txnId: found.txnId, status: 'SUCCESS', orderId: found.orderId }) : send(response, 404, { status: 'NOT_FOUND' });
      }
      send(response, 404, { error: 'not found' });
    });
  });
  // Long keep-alive: a socket closed by the server while the client reuses it would add a retry to the counts.
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;

  return {
    url: `http://127.0.0.1:${port}`,
    stats: () => ({ ...stats }),
    chargesFor: (orderId) => byOrder.get(orderId) ?? 0,
    requestsFor: (key) => requestsByKey.get(key) ?? 0,
    releaseLate() {
      for (const send of held.splice(0)) send();
    },
    async idle(timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (pending > held.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      return pending <= held.length;
    },
    async close() {
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

function send(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}
