/**
 * The problem `type`s: `urn:idemkit:problem:<slug>` by default, under `problemTypeBase` on every
 * producer of problem+json (the middleware of each adapter, both on a refusal and on a replacement
 * of the handler's answer, Express's problemErrorHandler, the webhook receivers), and a value that
 * is not a base refused when the factory is called, naming the option.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import Router from '@koa/router';
import Koa from 'koa';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidOptionError, LeaseLostError, PROBLEM_BASE, problemFor, KeyMismatchError } from '../../src/core/errors.js';
import { checkProblemTypeBase } from '../../src/core/option-reader.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { idempotency as expressIdempotency, problemErrorHandler } from '../../src/http/express.js';
import { idempotency as fastifyIdempotency } from '../../src/http/fastify.js';
import { idempotency as honoIdempotency } from '../../src/http/hono.js';
import { idempotency as koaIdempotency } from '../../src/http/koa.js';
import { withIdempotency } from '../../src/http/web.js';
import { signWebhook, webhookExpress, webhookFastify, webhookHandler, webhookReceiver } from '../../src/messaging/index.js';
import type { StoreWebhookOptions, WebhookOptions } from '../../src/messaging/index.js';
import type { FastifyLikeInstance, WebhookCommonOptions } from '../../src/messaging/webhook.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import type { TestApp } from './harness.js';
import { listenServer } from './apps/listen.js';

const BASE = 'https://docs.example.com/errors/';
const open: TestApp[] = [];
afterAll(async () => {
  await Promise.all(open.map((app) => app.close()));
});

async function listen(app: express.Express): Promise<TestApp> {
  const served = await listenServer(createServer(app));
  open.push(served);
  return served;
}

/**
 * A memory store with transactions whose completion is always refused (the record was taken over):
 * in transactional mode the engine replaces the handler's answer with 409 lease-lost.
 */
function losingStore(): IdempotencyStore {
  const store = memoryStore();
  const tx = {
    tx: undefined,
    complete: () => Promise.reject(new LeaseLostError()),
    checkpoint: () => Promise.resolve(),
    commit: () => Promise.resolve(),
    rollback: () => Promise.resolve(),
  };
  return new Proxy(store, {
    get(target, name) {
      if (name === 'beginTransaction') return () => Promise.resolve(tx);
      const value = Reflect.get(target, name) as unknown;
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** The lease-lost replacements are logged; the test reads the answers instead. */
const silent = { warn: () => {}, error: () => {} };
const keyed = () => ({ 'idempotency-key': randomUUID(), 'content-type': 'application/json' });

describe('checkProblemTypeBase', () => {
  it.each([
    'https://docs.example.com/errors/',
    'https://docs.example.com/errors#',
    'http://localhost:8080/problems/',
    'urn:example:problem:',
    'URN:acme-corp:errors:idempotency:',
    'tag:example.com,2026:problems:',
    'tag:example.com,2026:problems/',
  ])('accepts %s', (base) => {
    expect(checkProblemTypeBase('problemTypeBase', base)).toBe(base);
  });

  it('answers the default URN base when absent', () => {
    expect(checkProblemTypeBase('problemTypeBase', undefined)).toBe('urn:idemkit:problem:');
    expect(PROBLEM_BASE).toBe('urn:idemkit:problem:');
  });

  it.each([
    ['', 'expected an absolute URI'],
    [42, 'got 42'],
    ['/errors/', 'expected an absolute URI'],
    ['docs.example.com/errors/', 'expected an absolute URI'],
    ['https://docs.example.com/errors', 'must end in `/` or `#`'],
    ['https://docs.example.com/errors/?v=1/', 'no query'],
    ['https://docs.example.com/#errors/', 'a `#` may only end the base'],
    ['https://docs.example.com/my errors/', 'expected an absolute URI'],
    ['urn:example:problem', 'a URN base ends in `:`'],
    ['urn:example:problem/', 'a URN base ends in `:`'],
    ['urn::problem:', 'a URN starts `urn:<namespace>:`'],
    ['urn:example:problem#:', 'a URN base has no `?` or `#`'],
    ['mailto:', 'must end in `/` or `#`'],
  ])('refuses %j, naming the option', (base, why) => {
    const refusal = () => checkProblemTypeBase('problemTypeBase', base);
    expect(refusal).toThrow(InvalidOptionError);
    expect(refusal).toThrow('Invalid option `problemTypeBase`: expected an absolute URI ending in `/` or `#`');
    expect(refusal).toThrow(why);
  });
});

describe('problem() and problemFor() under a base', () => {
  it('default: urn:idemkit:problem:<slug>; with a base: base + slug, nothing else changed', () => {
    const error = new KeyMismatchError();
    expect(error.type).toBe('urn:idemkit:problem:key-reused');
    expect(problemFor(error)?.type).toBe('urn:idemkit:problem:key-reused');
    expect(problemFor(error, BASE)).toEqual({ ...error.problem(), type: `${BASE}key-reused` });
    expect(error.problem('urn:example:problem:').type).toBe('urn:example:problem:key-reused');
  });
});

describe('the middleware of each adapter', () => {
  it('Express: a refusal and a replacement under the base; the default without it', async () => {
    const app = express();
    app.post('/custom', expressIdempotency({ store: memoryStore(), problemTypeBase: BASE }), (_req, res) => void res.json({ ok: true }));
    app.post('/lost', expressIdempotency({ store: losingStore(), transactional: true, logger: silent, problemTypeBase: BASE }), (_req, res) => void res.json({ ok: true }));
    app.post('/default', expressIdempotency({ store: memoryStore() }), (_req, res) => void res.json({ ok: true }));
    const { url } = await listen(app);
    const missing = await fetch(`${url}/custom`, { method: 'POST', body: '{}' });
    expect([missing.status, (await missing.json()).type]).toEqual([400, `${BASE}missing-key`]);
    const lost = await fetch(`${url}/lost`, { method: 'POST', headers: keyed(), body: '{}' });
    expect([lost.status, (await lost.json()).type]).toEqual([409, `${BASE}lease-lost`]);
    const fallback = await fetch(`${url}/default`, { method: 'POST', body: '{}' });
    expect((await fallback.json()).type).toBe('urn:idemkit:problem:missing-key');
  });

  it('Fastify: a refusal and a replacement under the base; a route cannot set it', async () => {
    const plain = memoryStore();
    for (const [store, headers, expected] of [
      [plain, {}, [400, `${BASE}missing-key`]],
      [losingStore(), keyed(), [409, `${BASE}lease-lost`]],
    ] as const) {
      const app = Fastify();
      await app.register(fastifyIdempotency, { store, transactional: store !== plain, logger: silent, problemTypeBase: BASE });
      app.post('/orders', async () => ({ ok: true }));
      const answer = await app.inject({ method: 'POST', url: '/orders', headers, payload: {} });
      expect([answer.statusCode, answer.json().type]).toEqual(expected);
      await app.close();
    }
    const app = Fastify();
    await app.register(fastifyIdempotency, { store: memoryStore() });
    expect(() => app.post('/orders', { config: { idempotency: { problemTypeBase: BASE } as never } }, async () => ({}))).toThrow(
      'Invalid option `config.idempotency.problemTypeBase of /orders`: is an option of the plugin',
    );
    await app.close();
  });

  it('Hono and the Web handler: a refusal and a replacement under the base', async () => {
    const hono = new Hono();
    hono.post('/custom', honoIdempotency({ store: memoryStore(), problemTypeBase: BASE }), (c) => c.json({ ok: true }));
    hono.post('/lost', honoIdempotency({ store: losingStore(), transactional: true, logger: silent, problemTypeBase: BASE }), (c) => c.json({ ok: true }));
    const missing = await hono.request('/custom', { method: 'POST', body: '{}' });
    expect([missing.status, (await missing.json()).type]).toEqual([400, `${BASE}missing-key`]);
    const lost = await hono.request('/lost', { method: 'POST', headers: keyed(), body: '{}' });
    expect([lost.status, (await lost.json()).type]).toEqual([409, `${BASE}lease-lost`]);

    const web = withIdempotency(() => Response.json({ ok: true }), { store: losingStore(), transactional: true, logger: silent, problemTypeBase: 'urn:example:problem:' });
    const refused = await web(new Request('http://x/orders', { method: 'POST', body: '{}' }));
    expect((await refused.json()).type).toBe('urn:example:problem:missing-key');
    const replaced = await web(new Request('http://x/orders', { method: 'POST', headers: keyed(), body: '{}' }));
    expect([replaced.status, (await replaced.json()).type]).toEqual([409, 'urn:example:problem:lease-lost']);
  });

  it('Koa: a refusal and a replacement under the base (the handler\'s representation dropped); a route cannot set it', async () => {
    const router = new Router();
    const answer = (ctx: Koa.Context) => {
      ctx.set('location', '/orders/1');
      ctx.body = { ok: true };
    };
    router.post('/custom', koaIdempotency({ store: memoryStore(), problemTypeBase: BASE }), answer);
    router.post('/lost', koaIdempotency({ store: losingStore(), transactional: true, logger: silent, problemTypeBase: BASE }), answer);
    const handle = new Koa().use(router.routes()).callback();
    const served = await listenServer(createServer((req, res) => void handle(req, res)));
    open.push(served);
    const missing = await fetch(`${served.url}/custom`, { method: 'POST', body: '{}' });
    expect([missing.status, (await missing.json()).type]).toEqual([400, `${BASE}missing-key`]);
    const lost = await fetch(`${served.url}/lost`, { method: 'POST', headers: keyed(), body: '{}' });
    expect([lost.status, lost.headers.get('content-type'), lost.headers.get('location'), (await lost.json()).type]).toEqual([
      409,
      'application/problem+json',
      null,
      `${BASE}lease-lost`,
    ]);
    expect(() => koaIdempotency({ store: memoryStore() }).route({ problemTypeBase: BASE } as never)).toThrow(
      'Invalid option `route().problemTypeBase`: is an option of the middleware',
    );
  });

  it('every adapter refuses a bad base when the middleware is created, naming the option', async () => {
    const bad = { store: memoryStore(), problemTypeBase: 'https://docs.example.com/errors' };
    const message = /^Invalid option `problemTypeBase`: expected an absolute URI ending in `\/` or `#`/;
    expect(() => expressIdempotency(bad)).toThrow(message);
    expect(() => honoIdempotency(bad)).toThrow(message);
    expect(() => koaIdempotency(bad)).toThrow(message);
    expect(() => withIdempotency(() => new Response(), bad)).toThrow(message);
    const app = Fastify();
    await expect(app.register(fastifyIdempotency, bad).ready()).rejects.toThrow(message);
    await app.close().catch(() => {});
  });
});

describe('problemErrorHandler', () => {
  it("answers idemkit's errors under its own base; the generic problems stay about:blank", async () => {
    const app = express();
    app.post('/thrown', () => {
      throw new KeyMismatchError();
    });
    app.post('/broken', () => {
      throw new Error('boom');
    });
    app.use(problemErrorHandler({ problemTypeBase: BASE, onError: () => {} }));
    const { url } = await listen(app);
    const thrown = await fetch(`${url}/thrown`, { method: 'POST' });
    expect([thrown.status, (await thrown.json()).type]).toEqual([422, `${BASE}key-reused`]);
    const broken = await fetch(`${url}/broken`, { method: 'POST' });
    expect([broken.status, (await broken.json()).type]).toEqual([500, 'about:blank']);
  });

  it('defaults to the URN and refuses a bad base, naming the option', async () => {
    const app = express();
    app.post('/thrown', () => {
      throw new KeyMismatchError();
    });
    app.use(problemErrorHandler());
    const { url } = await listen(app);
    expect((await (await fetch(`${url}/thrown`, { method: 'POST' })).json()).type).toBe('urn:idemkit:problem:key-reused');
    expect(() => problemErrorHandler({ problemTypeBase: 'errors/' })).toThrow(/^Invalid option `problemTypeBase`: expected an absolute URI/);
  });
});

describe('the webhook receivers', () => {
  const secret = 'whsec_' + randomBytes(24).toString('base64');
  const options = (extra: Partial<WebhookCommonOptions & Pick<StoreWebhookOptions, 'onEvent'>> = {}): WebhookOptions => ({ secret, store: memoryStore(), consumer: `problems-${randomUUID()}`, onEvent: () => {}, ...extra });
  const unsigned = { 'webhook-id': 'evt_1', 'webhook-timestamp': String(Math.floor(Date.now() / 1000)), 'webhook-signature': 'v1,AAAA' };

  it('answer their own problems and body-too-large under the base; the default without it', async () => {
    const handle = webhookHandler(options({ problemTypeBase: BASE, maxBodyBytes: 8 }));
    const unverified = await handle(new Request('http://x/hook', { method: 'POST', headers: unsigned, body: '{}' }));
    expect([unverified.status, (await unverified.json()).type]).toEqual([401, `${BASE}webhook-unverified`]);
    const large = await handle(new Request('http://x/hook', { method: 'POST', headers: unsigned, body: 'x'.repeat(64) }));
    expect([large.status, (await large.json()).type]).toEqual([413, `${BASE}body-too-large`]);

    const failing = webhookReceiver(options({ problemTypeBase: 'urn:example:hooks:', onEvent: () => Promise.reject(new Error('down')) }));
    const at = Math.floor(Date.now() / 1000);
    const body = new TextEncoder().encode('{}');
    const failed = await failing.receive({ 'webhook-id': 'evt_2', 'webhook-timestamp': String(at), 'webhook-signature': signWebhook(secret, 'evt_2', at, '{}') }, body);
    expect([failed.status, JSON.parse(failed.body).type]).toEqual([500, 'urn:example:hooks:webhook-failed']);

    const plain = await webhookHandler(options())(new Request('http://x/hook', { method: 'POST', headers: unsigned, body: '{}' }));
    expect((await plain.json()).type).toBe('urn:idemkit:problem:webhook-unverified');
  });

  it('Express and Fastify forms answer under the base too', async () => {
    const app = express();
    app.post('/hook', express.raw({ type: '*/*' }), webhookExpress(options({ problemTypeBase: BASE, maxBodyBytes: 8 })));
    const { url } = await listen(app);
    const large = await fetch(`${url}/hook`, { method: 'POST', headers: unsigned, body: 'x'.repeat(64) });
    expect([large.status, (await large.json()).type]).toEqual([413, `${BASE}body-too-large`]);

    const fastify = Fastify();
    webhookFastify(fastify as unknown as FastifyLikeInstance, '/hook', options({ problemTypeBase: BASE }));
    const unverified = await fastify.inject({ method: 'POST', url: '/hook', headers: unsigned, payload: '{}' });
    expect([unverified.statusCode, unverified.json().type]).toEqual([401, `${BASE}webhook-unverified`]);
    await fastify.close();
  });

  it('refuse a bad base when built, naming the option', () => {
    for (const build of [webhookHandler, webhookExpress, webhookReceiver]) {
      expect(() => build(options({ problemTypeBase: 'https://docs.example.com/errors?type=' }))).toThrow(
        /^Invalid option `problemTypeBase`: expected an absolute URI ending in `\/` or `#`.*must end in `\/` or `#`/,
      );
    }
  });
});
