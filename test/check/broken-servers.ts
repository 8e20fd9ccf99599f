// Deliberately broken targets on plain node:http. Each implements the Idempotency-Key matrix
// (400 without a key, 409 in flight, 422 on a mismatch, replay with the header) except for ONE
// fault, so a check run against it must FAIL on that fault's case.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
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

/**
 * What a hostile target would send an operator's terminal, as raw bytes: retitle it (OSC 0 …
 * BEL), erase a line and move up to fake one (CSI 2K, CSI 1A), set the clipboard (OSC 52), and
 * the same as 8-bit C1 controls (CSI U+009B, OSC U+009D, ST U+009C).
 */
export const HOSTILE = {
  /** In a header value: node refuses C0 there on both ends, so these are C1 (Latin-1 bytes). */
  header: '\x9b2K\x9b1A\x9d0;header\x9c',
  /** In a problem+json title and detail and in a 201 body (raw, not JSON-escaped: a hostile server does not care). */
  title: '\x1b]0;title\x07',
  detail: '\x1b[2K\x1b[1A\x1b]52;c;cHduZWQ=\x07',
  body: '\x1b]0;body\x07\x9b31m\x7f',
} as const;

/**
 * The Idempotency-Key matrix done right, but every answer carries control characters: a 201 body
 * with HOSTILE.body, a replay marked `Idempotent-Replayed: HOSTILE.header` (so not `true`), a
 * 400/409/422 problem+json with HOSTILE.title and HOSTILE.detail. `refuseAll`: every request
 * gets that problem as a 403 (the check cannot even start).
 */
export async function startHostile(options: { refuseAll?: boolean } = {}): Promise<Running> {
  const records = new Map<string, { body: string; response: string }>();
  const problem = (res: ServerResponse, status: number) =>
    void res
      .writeHead(status, { 'content-type': 'application/problem+json' })
      .end(`{"title":"${HOSTILE.title}","detail":"${HOSTILE.detail}","status":${status},"type":"about:blank"}`);
  const server = createServer((req, res) => void (async () => {
    const body = await readBody(req);
    if (body === undefined) return;
    if (options.refuseAll) return problem(res, 403);
    if (req.method === 'GET') return void res.writeHead(200, { 'content-type': 'text/plain' }).end(HOSTILE.body);
    const key = keyOf(req);
    if (key === undefined) return problem(res, 400);
    const entry = records.get(key);
    if (!entry) {
      const response = `{"id":"${randomUUID()}","note":"${HOSTILE.body}"}`;
      records.set(key, { body, response });
      return void res.writeHead(201, { 'content-type': 'application/json' }).end(response);
    }
    if (entry.body !== body) return problem(res, 422);
    res.writeHead(201, { 'content-type': 'application/json', 'idempotent-replayed': HOSTILE.header }).end(entry.response);
  })());
  return listen(server);
}
