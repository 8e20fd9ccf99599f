/**
 * Issue 26, item 20: idemkit behind real gateways that resend a POST after their upstream timeout
 * (nginx `proxy_next_upstream … non_idempotent`, HAProxy `retry-on all-retryable-errors`), and
 * behind one that does not (nginx's default: 504 for a charge that went through). What
 * docs/gateways.md recommends for each is what these tests run.
 *
 * Two Fastify upstreams share one store; the gateway balances between them. The handler does not
 * sleep past the gateway's timeout: it waits for the event that proves the gateway gave up on it
 * (the resend reached idemkit, or the gateway closed the upstream connection), so the outcome does
 * not depend on how fast this machine is. The gateway's own upstream timeout (1 s) is the only
 * clock, and nothing is asserted about time.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createIdempotentFetch } from '../../src/client/index.js';
import type { IdempotencyEvents } from '../../src/core/events.js';
import { idempotency } from '../../src/http/fastify.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { freePort, listensOn, retryOnPortTaken } from '../support/ports.js';
import { gatewayAvailable } from './support.js';

const hasNginx = gatewayAvailable('nginx', 'nginx-light');
const hasHaproxy = gatewayAvailable('haproxy', 'haproxy');

const scratch = mkdtempSync(join(tmpdir(), 'idemkit-gateways-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** How a test's upstreams behave, and what they saw. */
interface Upstreams {
  readonly ports: readonly [number, number];
  /** Handler runs (business effects): must be one per key. */
  executions: number;
  /** Every answer idemkit decided for a duplicate, by kind. */
  readonly decided: string[];
  close(): Promise<void>;
}

/**
 * Two Fastify apps on one memory store. The handler's first run holds until `release` is called
 * with its request; `holdUntil` says when each test releases it.
 */
async function startUpstreams(options: { inFlight: 'conflict' | 'wait'; holdUntil: 'resend-decided' | 'resend-arrived' | 'gateway-gave-up' }): Promise<Upstreams> {
  const store = memoryStore();
  let release: () => void = () => {};
  const released = new Promise<void>((resolve) => (release = resolve));
  const upstreams: Upstreams = {
    ports: [0, 0],
    executions: 0,
    decided: [],
    async close() {
      release();
      await Promise.all(apps.map((app) => app.close()));
    },
  };
  const events: IdempotencyEvents = {
    conflict: () => {
      upstreams.decided.push('conflict');
      if (options.holdUntil === 'resend-decided') release();
    },
    replay: () => void upstreams.decided.push('replay'),
  };
  const apps: FastifyInstance[] = [];
  const ports: number[] = [];
  for (let i = 0; i < 2; i++) {
    const app = Fastify();
    app.addHook('onRequest', async () => {
      // A second arrival of the same request is the gateway's resend.
      if (options.holdUntil === 'resend-arrived' && upstreams.executions === 1) release();
    });
    await app.register(idempotency, { store, scope: () => 'tenant-1', inFlight: options.inFlight, waitTimeoutMs: 800, events });
    app.post('/charges', async (request, reply) => {
      upstreams.executions++;
      // The gateway gave up on this attempt when it closed the upstream connection.
      if (options.holdUntil === 'gateway-gave-up') request.raw.socket.once('close', release);
      await released;
      return reply.code(201).send({ id: randomUUID(), amount: (request.body as { amount: number }).amount });
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    apps.push(app);
    ports.push((app.server.address() as AddressInfo).port);
  }
  (upstreams as { ports: readonly [number, number] }).ports = [ports[0]!, ports[1]!];
  return upstreams;
}

interface Gateway {
  readonly url: string;
  stop(): void;
}

/**
 * Starts the gateway on a free port. nginx and HAProxy both say "Address already in use" when that
 * port was taken before they bound it: the gateway is started again on another.
 */
async function startGateway(command: string, args: string[], config: (port: number) => string): Promise<Gateway> {
  return retryOnPortTaken(async () => {
    const port = await freePort();
    return spawnGateway(command, args, config(port), port);
  });
}

async function spawnGateway(command: string, args: string[], config: string, port: number): Promise<Gateway> {
  const dir = mkdtempSync(join(scratch, 'gw-'));
  const file = join(dir, 'gateway.conf');
  writeFileSync(file, config.replaceAll('$DIR', dir));
  const child: ChildProcess = spawn(command, args.map((arg) => arg.replace('$CONF', file)), { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const url = `http://127.0.0.1:${port}`;
  const stop = () => child.kill('SIGKILL');
  // Up when the gateway itself listens on the port: poll, not a guessed delay. Not when the port
  // accepts a connection, nor when a bind of our own fails: another process may hold the port.
  for (let attempt = 0; ; attempt++) {
    if (child.exitCode !== null) throw new Error(`${command} exited with ${child.exitCode}: ${stderr}`);
    // nginx retries a taken port for 2 s before giving up: no need to wait for that.
    if (stderr.includes('Address already in use')) {
      stop();
      throw new Error(`${command} could not bind ${port}: ${stderr}`);
    }
    if (listensOn(child.pid!, port)) break;
    if (attempt === 500) {
      stop();
      throw new Error(`${command} did not listen on ${port}: ${stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return { url, stop };
}

function nginxConfig(port: number, upstreams: Upstreams, resendPosts: boolean): string {
  return `
daemon off;
master_process off;
worker_processes 1;
pid $DIR/nginx.pid;
error_log $DIR/error.log warn;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $DIR/body; proxy_temp_path $DIR/proxy; fastcgi_temp_path $DIR/fastcgi;
  uwsgi_temp_path $DIR/uwsgi; scgi_temp_path $DIR/scgi;
  upstream app { server 127.0.0.1:${upstreams.ports[0]}; server 127.0.0.1:${upstreams.ports[1]}; }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://app;
      proxy_read_timeout 1s;
      proxy_next_upstream ${resendPosts ? 'error timeout non_idempotent' : 'error timeout'};
      proxy_next_upstream_tries 2;
    }
  }
}`;
}

function haproxyConfig(port: number, upstreams: Upstreams): string {
  return `
global
  maxconn 64
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server 1s
  retries 1
  option redispatch 1
  retry-on all-retryable-errors
frontend web
  bind 127.0.0.1:${port}
  default_backend app
backend app
  balance roundrobin
  server a 127.0.0.1:${upstreams.ports[0]}
  server b 127.0.0.1:${upstreams.ports[1]}
`;
}

const charge = (url: string, key: string) =>
  fetch(`${url}/charges`, { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{"amount":1200}' });

let running: Array<{ stop(): void } | Upstreams> = [];
afterEach(async () => {
  for (const thing of running) await ('close' in thing ? thing.close() : thing.stop());
  running = [];
});

const resendingGateways = [
  ...(hasNginx ? [{ name: 'nginx (proxy_next_upstream … non_idempotent)', start: async (up: Upstreams) => startGateway('nginx', ['-c', '$CONF'], (port) => nginxConfig(port, up, true)) }] : []),
  ...(hasHaproxy ? [{ name: 'HAProxy (retry-on all-retryable-errors)', start: async (up: Upstreams) => startGateway('haproxy', ['-db', '-f', '$CONF'], (port) => haproxyConfig(port, up)) }] : []),
];

describe.skipIf(resendingGateways.length === 0).each(resendingGateways)('behind $name, which resends a POST after its upstream timeout', ({ start }) => {
  it("default (inFlight: 'conflict'): the resend answers 409 to the caller while the first attempt's charge goes through, once", async () => {
    const upstreams = await startUpstreams({ inFlight: 'conflict', holdUntil: 'resend-decided' });
    running.push(upstreams);
    const gateway = await start(upstreams);
    running.push(gateway);

    const first = await charge(gateway.url, 'gw-conflict-1');
    expect(first.status).toBe(409);
    expect(first.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(upstreams.decided).toEqual(['conflict']);
    // The caller's retry with the same key gets the charge that did go through.
    const client = createIdempotentFetch({ minTimeout: 10, maxTimeout: 50 });
    const retried = await client(`${gateway.url}/charges`, { method: 'POST', headers: { 'idempotency-key': 'gw-conflict-1', 'content-type': 'application/json' }, body: '{"amount":1200}' });
    expect(retried.status).toBe(201);
    expect(retried.headers.get('idempotent-replayed')).toBe('true');
    expect(upstreams.executions).toBe(1);
  });

  it("recommended (inFlight: 'wait', waitTimeoutMs below the gateway's timeout): the resend waits for the first attempt and the caller's first answer is the real 201", async () => {
    const upstreams = await startUpstreams({ inFlight: 'wait', holdUntil: 'resend-arrived' });
    running.push(upstreams);
    const gateway = await start(upstreams);
    running.push(gateway);

    const first = await charge(gateway.url, 'gw-wait-1');
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBe('true');
    expect(((await first.json()) as { amount: number }).amount).toBe(1200);
    expect(upstreams.executions).toBe(1);
    expect(upstreams.decided).toEqual(['replay']);
  });
});

describe.skipIf(!hasNginx)("behind nginx's default (proxy_next_upstream error timeout): a POST is not resent", () => {
  it('the caller gets 504 for a charge that went through; its retry with the same key replays it, once', async () => {
    const upstreams = await startUpstreams({ inFlight: 'conflict', holdUntil: 'gateway-gave-up' });
    running.push(upstreams);
    const gateway = await startGateway('nginx', ['-c', '$CONF'], (port) => nginxConfig(port, upstreams, false));
    running.push(gateway);

    const first = await charge(gateway.url, 'gw-504-1');
    expect(first.status).toBe(504);
    // idemkit/client retries a 504 (and a 409 while the first attempt finishes) with the same key.
    const client = createIdempotentFetch({ minTimeout: 10, maxTimeout: 50 });
    const retried = await client(`${gateway.url}/charges`, { method: 'POST', headers: { 'idempotency-key': 'gw-504-1', 'content-type': 'application/json' }, body: '{"amount":1200}' });
    expect(retried.status).toBe(201);
    expect(retried.headers.get('idempotent-replayed')).toBe('true');
    expect(upstreams.executions).toBe(1);
  });
});

describe('docs/gateways.md', () => {
  const root = join(import.meta.dirname, '..', '..');
  const read = (file: string) => readFileSync(join(root, file), 'utf8');
  it('names the gateway settings this suite runs and recommends its inFlight setting; both READMEs and the walkthrough link it', () => {
    const page = read('docs/gateways.md');
    for (const text of ['proxy_next_upstream error timeout non_idempotent', 'retry-on all-retryable-errors', "inFlight: 'wait'", 'waitTimeoutMs', '504', 'test/gateways/gateways.test.ts']) {
      expect(page).toContain(text);
    }
    for (const file of ['README.md', 'README.zh-CN.md']) expect(read(file)).toContain('(docs/gateways.md)');
    expect(read('docs/payments-walkthrough.md')).toContain('(gateways.md)');
  });
});
