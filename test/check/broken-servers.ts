// Deliberately broken targets on plain node:http. Each implements the Idempotency-Key matrix
// (400 without a key, 409 in flight, 422 on a mismatch, replay with the header) except for ONE
// fault, so a check run against it must FAIL on that fault's case.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingMessage, Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Running } from './servers.js';

export type Fault =
  /** Remembers keys but runs the handler on every request: a new id each time. */
  | 'runs-twice'
  /** Answers 200 (running the handler) to the same key with a different body. */
  | 'mismatch-200'
  /** Replays correctly but without `Idempotent-Replayed: true`. */
  | 'no-replay-header'
  /** Check-then-act: records the key only when the handler is done, so concurrent requests all run. */
  | 'no-lock';

interface Entry {
  readonly body: string;
  response?: { status: number; body: string };
}

export async function startBroken(fault: Fault): Promise<Running> {
  const records = new Map<string, Entry>();
  const handler = async (body: string) => {
    // A real await, so concurrent requests overlap as they would with a database.
    await new Promise((resolve) => setTimeout(resolve, 5));
    return { status: 201, body: JSON.stringify({ id: randomUUID(), ...(JSON.parse(body || '{}') as object) }) };
  };
  const server = createServer((req, res) => void (async () => {
    const body = await readBody(req);
    if (body === undefined) return; // the client went away (the race's 100-continue probe does)
    if (req.method !== 'POST' && req.method !== 'PATCH') return void res.writeHead(404).end();
    const key = keyOf(req);
    if (key === undefined) return void res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"bad or missing key"}');
    const entry = records.get(key);
    const send = (r: { status: number; body: string }, replay: boolean) => {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (replay && fault !== 'no-replay-header') headers['idempotent-replayed'] = 'true';
      res.writeHead(r.status, headers).end(r.body);
    };
    if (!entry) {
      const fresh: Entry = { body };
      if (fault !== 'no-lock') records.set(key, fresh);
      fresh.response = await handler(body);
      if (fault === 'no-lock') records.set(key, fresh);
      return send(fresh.response, false);
    }
    if (entry.body !== body) {
      if (fault === 'mismatch-200') return send({ ...(await handler(body)), status: 200 }, false);
      return void res.writeHead(422, { 'content-type': 'application/json' }).end('{"error":"key reused"}');
    }
    if (!entry.response) return void res.writeHead(409, { 'content-type': 'application/json', 'retry-after': '1' }).end('{"error":"in flight"}');
    if (fault === 'runs-twice') return send(await handler(body), true);
    return send(entry.response, true);
  })());
  return listen(server);
}

/** Accepts connections and never answers. */
export async function startHanging(): Promise<Running> {
  return listen(createServer(() => {}));
}

async function listen(server: Server): Promise<Running> {
  const sockets = new Set<Socket>();
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/charges`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The key, bare or as an sf-string; undefined when missing, repeated or malformed. */
function keyOf(req: IncomingMessage): string | undefined {
  const lines = req.rawHeaders.filter((_v, i) => i % 2 === 0 && req.rawHeaders[i]!.toLowerCase() === 'idempotency-key');
  if (lines.length !== 1) return undefined;
  const raw = req.headers['idempotency-key'] as string;
  const value = /^"(.*)"$/.exec(raw)?.[1] ?? raw;
  return /^[\x21\x23-\x2b\x2d-\x7e]{1,255}$/.test(value) ? value : undefined;
}

function readBody(req: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString()));
    req.on('error', () => resolve(undefined));
  });
}

/** Answers the first request (201, a fresh id) and then never answers again. */
export async function startHangingAfterFirst(): Promise<Running> {
  let answered = false;
  return listen(
    createServer((req, res) => {
      req.resume();
      req.on('error', () => {});
      req.on('end', () => {
        if (answered) return;
        answered = true;
        res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: randomUUID() }));
      });
    }),
  );
}
