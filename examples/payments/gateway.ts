/**
 * A lossy API gateway between the clients and the service (scenario 2). It forwards every request,
 * and for a seeded share of first attempts it loses the answer AFTER the service executed:
 * - `drop`: the connection is closed without a response (the client sees a socket error);
 * - `timeout`: it answers 504, as a gateway whose upstream timer fired.
 * Both are the seed's third network failure: the effect happened, the client cannot know.
 * Later attempts with the same key pass untouched, so the retry shows what the service does.
 */
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import { chance } from './rng.js';

export interface GatewayStats {
  requests: number;
  dropped: number;
  timedOut: number;
}

export interface Gateway {
  readonly url: string;
  readonly stats: GatewayStats;
  close(): Promise<void>;
}

export async function startGateway(upstream: string, o: { seed: string; dropRate: number; timeoutRate: number }): Promise<Gateway> {
  const stats: GatewayStats = { requests: 0, dropped: 0, timedOut: 0 };
  const attempts = new Map<string, number>();
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => void (async () => {
      stats.requests++;
      const key = String(request.headers['idempotency-key'] ?? '');
      const attempt = (attempts.get(key) ?? 0) + 1;
      attempts.set(key, attempt);
      const headers = new Headers();
      for (const [name, value] of Object.entries(request.headers)) {
        if (typeof value === 'string' && !['host', 'connection', 'content-length'].includes(name)) headers.set(name, value);
      }
      let upstreamResponse: Response;
      let body: Buffer;
      try {
        upstreamResponse = await fetch(upstream + request.url, {
          method: request.method,
          headers,
          body: chunks.length > 0 ? Buffer.concat(chunks) : undefined,
        });
        body = Buffer.from(await upstreamResponse.arrayBuffer());
      } catch {
        response.writeHead(502).end();
        return;
      }
      const roll = key && attempt === 1 ? chance(o.seed, 'gateway', key) : 1;
      if (roll < o.dropRate) {
        stats.dropped++;
        response.socket?.destroy();
        return;
      }
      if (roll < o.dropRate + o.timeoutRate) {
        stats.timedOut++;
        response.writeHead(504, { 'content-type': 'application/problem+json' }).end(JSON.stringify({ title: 'Gateway Timeout', status: 504 }));
        return;
      }
      const out: Record<string, string> = {};
      upstreamResponse.headers.forEach((value, name) => {
        if (!['content-length', 'transfer-encoding', 'connection', 'keep-alive'].includes(name)) out[name] = value;
      });
      response.writeHead(upstreamResponse.status, out).end(body);
    })());
  });
  // Long keep-alive: a socket the gateway closed while a client reused it would count as a lost answer.
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    stats,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
