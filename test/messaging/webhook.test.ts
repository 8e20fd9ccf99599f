import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import express from 'express';
// @ts-expect-error -- `express4` is an npm alias of express@4, which ships no types of its own.
import untypedExpress4 from 'express4';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import { MIN_SECRET_BYTES } from '../../src/messaging/webhook-verify.js';
import { migrateProcessed, signWebhook, verifyWebhook, webhookExpress, webhookFastify, webhookHandler, WebhookVerificationError } from '../../src/messaging/index.js';
import { webhookKeys } from '../../src/messaging/webhook-verify.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import type { WebhookEvent, WebhookOptions } from '../../src/messaging/index.js';
import type { FastifyLikeInstance, WebhookCommonOptions } from '../../src/messaging/webhook.js';
import type { SqlExecutor } from '../../src/patterns/sql.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import type { TestDatabase } from '../support/databases.js';
import { sqliteDatabase } from '../support/databases.js';

const express4 = untypedExpress4 as typeof express;
const secret = 'whsec_' + randomBytes(24).toString('base64');
const nowSec = () => Math.floor(Date.now() / 1000);

function signed(id: string, body: string, options: { at?: number; key?: string; signature?: string } = {}): Record<string, string> {
  const at = options.at ?? nowSec();
  return {
    'content-type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(at),
    'webhook-signature': options.signature ?? signWebhook(options.key ?? secret, id, at, body),
  };
}

describe('verifyWebhook (Standard Webhooks)', () => {
  it('matches the reference test vector of the specification’s libraries', () => {
    const headers = {
      'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      'webhook-timestamp': '1614265330',
      'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    };
    const verified = verifyWebhook(headers, '{"test": 2432232314}', { secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', clock: () => 1614265330_000 });
    expect(verified).toEqual({ id: 'msg_p5jXN8AQM9LWM0D4loKWxJek', timestamp: 1614265330 });
  });

  it('refuses bad signatures, stale or future timestamps and missing headers, with a reason', () => {
    const body = '{"a":1}';
    // One instant for signing and verifying: a second that ticks over between the two must not
    // move a timestamp across the tolerance or away from the one that was signed.
    const now = nowSec();
    const sign = (id: string, b: string, o: { at?: number; key?: string; signature?: string } = {}) => signed(id, b, { at: now, ...o });
    const reason = (headers: Record<string, string>, b = body, extra: Partial<Parameters<typeof verifyWebhook>[2]> = {}) => {
      try {
        verifyWebhook(new Headers(headers), b, { secret, clock: () => now * 1000, ...extra });
        return 'ok';
      } catch (error) {
        expect(error).toBeInstanceOf(WebhookVerificationError);
        return (error as WebhookVerificationError).reason;
      }
    };
    expect(reason(sign('e1', body))).toBe('ok');
    expect(reason(sign('e1', body), '{"a":2}')).toBe('bad-signature');
    expect(reason(sign('e1', body, { key: 'whsec_' + randomBytes(24).toString('base64') }))).toBe('bad-signature');
    expect(reason({ ...sign('e1', body), 'webhook-id': 'e2' })).toBe('bad-signature');
    expect(reason(sign('e1', body, { at: now - 301 }))).toBe('stale-timestamp');
    expect(reason(sign('e1', body, { at: now + 301 }))).toBe('stale-timestamp');
    // The tolerance itself is inside, both ways.
    expect(reason(sign('e1', body, { at: now - 300 }))).toBe('ok');
    expect(reason(sign('e1', body, { at: now + 300 }))).toBe('ok');
    expect(reason(sign('e1', body, { at: now - 200 }))).toBe('ok');
    expect(reason(sign('e1', body, { at: now - 200 }), body, { toleranceSec: 60 })).toBe('stale-timestamp');
    expect(reason({ ...sign('e1', body), 'webhook-timestamp': '12.5' })).toBe('bad-timestamp');
    const { 'webhook-signature': _drop, ...unsigned } = sign('e1', body);
    expect(reason(unsigned)).toBe('missing-headers');
    // Only `v1` entries count; several entries may be sent (rotation on the sender's side).
    const good = signWebhook(secret, 'e1', now, body).slice(3);
    expect(reason(sign('e1', body, { signature: `v1a,${good}` }))).toBe('bad-signature');
    expect(reason(sign('e1', body, { signature: `v1,${randomBytes(32).toString('base64')} v1,${good}` }))).toBe('ok');
  });

  it('accepts any of several secrets during a rotation; refuses malformed secrets naming the option', () => {
    const old = 'whsec_' + randomBytes(24).toString('base64');
    const headers = signed('e1', 'x', { key: old });
    expect(verifyWebhook(headers, 'x', { secret: [secret, old] }).id).toBe('e1');
    expect(() => verifyWebhook(headers, 'x', { secret })).toThrow(WebhookVerificationError);
    expect(() => verifyWebhook(headers, 'x', { secret: 'whsec_not base64!' })).toThrow(InvalidOptionError);
    expect(() => verifyWebhook(headers, 'x', { secret: [] })).toThrow(/`secret`/);
    expect(() => verifyWebhook(headers, 'x', { secret, toleranceSec: 0 })).toThrow(/`toleranceSec`/);
  });
});

describe('verifyWebhook is strict: one spelling per signature, strong secrets only (issue 14, item 13)', () => {
  const body = '{"amount":5}';
  const at = nowSec();
  /** A signature whose base64 holds both `+` and `/`, so its base64url form differs in two characters. */
  function signedWithBothAlphabets(): { id: string; mac: string } {
    for (let i = 0; ; i++) {
      const mac = signWebhook(secret, `evt_${i}`, at, body).slice('v1,'.length);
      if (mac.includes('+') && mac.includes('/')) return { id: `evt_${i}`, mac };
    }
  }
  const { id, mac } = signedWithBothAlphabets();
  const verdict = (signature: string) => {
    try {
      verifyWebhook({ 'webhook-id': id, 'webhook-timestamp': String(at), 'webhook-signature': signature }, body, { secret, clock: () => at * 1000 });
      return 'ok';
    } catch (error) {
      if (!(error instanceof WebhookVerificationError)) throw error;
      return error.reason;
    }
  };

  it('accepts the exact signature', () => {
    expect(mac).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    expect(verdict(`v1,${mac}`)).toBe('ok');
  });

  it.each([
    ['junk appended after the padding', `${mac}AAAA`],
    ['junk appended after the padding, itself padded', `${mac}QQ==`],
    ['base64url alphabet', mac.replaceAll('+', '-').replaceAll('/', '_')],
    ['base64url without padding', mac.replaceAll('+', '-').replaceAll('/', '_').slice(0, -1)],
    ['missing padding', mac.slice(0, -1)],
    ['extra padding', `${mac}=`],
    ['extra padding, twice', `${mac}==`],
    ['non-zero bits in the last character (another spelling of the same bytes)', `${mac.slice(0, 42)}${String.fromCharCode(mac.charCodeAt(42) + 1)}=`],
    ['truncated by one byte', Buffer.from(mac, 'base64').subarray(0, 31).toString('base64')],
    ['one byte longer', Buffer.concat([Buffer.from(mac, 'base64'), Buffer.from([0])]).toString('base64')],
    ['a tab inside', `${mac.slice(0, 20)}\t${mac.slice(20)}`],
    ['a line feed inside', `${mac.slice(0, 20)}\n${mac.slice(20)}`],
    ['a trailing tab', `${mac}\t`],
  ])('refuses a valid signature with %s', (_what, malleated) => {
    expect(malleated).not.toBe(mac);
    expect(verdict(`v1,${malleated}`)).toBe('bad-signature');
    // Still refused when a wrong but well-formed entry comes first (every entry is judged alone).
    expect(verdict(`v1,${randomBytes(32).toString('base64')} v1,${malleated}`)).toBe('bad-signature');
  });

  it('refuses a space between `v1,` and the signature', () => {
    expect(verdict(`v1, ${mac}`)).toBe('bad-signature');
  });

  // Random key bytes whose base64 starts with `+` (0xfb): never all hex digits, whatever follows.
  const keyOf = (bytes: number) => Buffer.concat([Buffer.from([0xfb]), randomBytes(bytes - 1)]);
  const base64Of = (bytes: number) => keyOf(bytes).toString('base64');
  const refusal = (value: unknown) => {
    try {
      webhookKeys(value as never);
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidOptionError);
      return error as InvalidOptionError;
    }
    throw new Error('the secret was accepted');
  };

  it('refuses weak secrets, naming the option and the floor', () => {
    for (const weak of ['whsec_' + base64Of(1), 'whsec_' + base64Of(15), base64Of(8), new Uint8Array(1), new Uint8Array(15)]) {
      const error = refusal(weak);
      expect(error.option).toBe('secret');
      expect(error.message).toMatch(/at least 16 random bytes/);
    }
    expect(refusal('whsec_').message).toMatch(/empty/);
    expect(refusal(new Uint8Array(0)).message).toMatch(/0 byte/);
    // The floor itself, and the specification's sizes, are accepted.
    for (const bytes of [16, 24, 32, 64]) expect(webhookKeys('whsec_' + base64Of(bytes))[0]).toHaveLength(bytes);
    expect(webhookKeys(new Uint8Array(16))[0]).toHaveLength(16);
    expect(MIN_SECRET_BYTES).toBe(16);
  });

  it('refuses a secret that is not standard base64 instead of decoding garbage, saying what form is expected', () => {
    // Its base64 starts with `++++////`: the base64url spelling surely differs, and no case is all hex.
    const key = Buffer.concat([Buffer.from('fbefbeffffff', 'hex'), randomBytes(26)]);
    const cases: Array<[string, string, RegExp]> = [
      ['hex', 'whsec_' + key.toString('hex'), /looks like hex.*Buffer\.from\(hex, 'hex'\)/],
      ['upper-case hex', key.toString('hex').toUpperCase(), /looks like hex/],
      ['base64url', 'whsec_' + key.toString('base64url'), /base64url/],
      ['missing padding', 'whsec_' + key.toString('base64').replace(/=+$/, ''), /not canonical base64/],
      ['extra padding', 'whsec_' + base64Of(24) + '==', /not canonical base64/],
      ['a trailing line feed', 'whsec_' + key.toString('base64') + '\n', /whitespace/],
      ['a space inside', 'whsec_' + key.toString('base64').replace(/^(.{10})/, '$1 '), /whitespace/],
      ['other characters', 'whsec_' + key.toString('base64').replace(/^./, '*'), /outside base64/],
    ];
    for (const [what, text, message] of cases) {
      const error = refusal(text);
      expect(error.option, what).toBe('secret');
      expect(error.message, what).toMatch(message);
      expect(error.message, what).toMatch(/`whsec_` followed by standard base64/);
      // The secret itself never appears in the error (errors end up in logs).
      expect(error.message, what).not.toContain(text.slice(6, 30));
    }
    // In a rotation list, the entry is named by its position.
    expect(refusal([secret, 'whsec_' + key.toString('hex')]).option).toBe('secret[1]');
  });

  it('refuses a weak or malformed secret when a receiver is built, before any request', () => {
    const options = { store: memoryStore(), consumer: 'strict', onEvent: () => undefined };
    expect(() => webhookHandler({ ...options, secret: 'whsec_' + base64Of(1) })).toThrow(/`secret`.*at least 16/);
    expect(() => webhookHandler({ ...options, secret: 'whsec_' + randomBytes(32).toString('hex') })).toThrow(/`secret`.*hex/);
  });
});

describe('a webhook delivered again while the first delivery runs (issue 16, item 1)', () => {
  async function secondDeliveryRetryAfter(extra: Partial<WebhookCommonOptions & { store: IdempotencyStore }>): Promise<{ status: number; retryAfter: string | null; runs: number }> {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let runs = 0;
    const handler = webhookHandler({
      secret,
      store: memoryStore(),
      consumer: 'hint',
      leaseMs: 60_000,
      ...extra,
      onEvent: async () => {
        runs += 1;
        await gate;
      },
    });
    const body = '{"type":"order.paid"}';
    const deliver = () => handler(new Request('http://x/webhooks', { method: 'POST', headers: signed('evt_hint', body), body }));
    const first = deliver();
    while (runs === 0) await new Promise((resolve) => setImmediate(resolve));
    const second = await deliver();
    release();
    expect((await first).status).toBe(200);
    return { status: second.status, retryAfter: second.headers.get('retry-after'), runs };
  }

  it('answers 409 with a short retry hint, not the rest of the 60 s lease', async () => {
    expect(await secondDeliveryRetryAfter({})).toEqual({ status: 409, retryAfter: '1', runs: 1 });
  });

  it('takes the hint from retryAfterMs, and never past the lease', async () => {
    expect(await secondDeliveryRetryAfter({ retryAfterMs: 5_000 })).toEqual({ status: 409, retryAfter: '5', runs: 1 });
    // The store's clock stands still (injected), so exactly the 3 s lease is left.
    const frozen = memoryStore({ clock: () => 1_700_000_000_000 });
    expect(await secondDeliveryRetryAfter({ retryAfterMs: 600_000, leaseMs: 3_000, store: frozen })).toEqual({ status: 409, retryAfter: '3', runs: 1 });
  });
});

describe('webhook receivers (Web/Hono, Fastify, Express) on SQLite', () => {
  let t: TestDatabase;
  let table: string;
  let effects: string;
  let db: SqlExecutor;
  let failNext = false;

  beforeAll(async () => {
    t = sqliteDatabase();
    db = t.db;
    table = t.table('hooks');
    effects = t.table('hook_effects');
    await migrateProcessed(db, { table });
    await db.query(`CREATE TABLE ${effects} (event_id TEXT NOT NULL, amount INTEGER NOT NULL)`);
  });
  afterAll(() => t?.close());

  const options = (consumer: string): WebhookOptions => ({
    secret,
    db,
    table,
    consumer,
    onEvent: async (event: WebhookEvent, tx) => {
      await tx.query(`INSERT INTO ${effects} (event_id, amount) VALUES (?, ?)`, [event.id, event.json<{ amount: number }>().amount]);
      if (failNext) {
        failNext = false;
        throw new Error('downstream failed');
      }
    },
  });
  const rows = async (sql: string, params: unknown[] = []) => Number((await db.query<{ n: number }>(sql, params)).rows[0]!.n);
  const records = (consumer: string) => rows(`SELECT COUNT(*) AS n FROM ${table} WHERE consumer = ?`, [consumer]);
  const effectsOf = (id: string) => rows(`SELECT COUNT(*) AS n FROM ${effects} WHERE event_id = ?`, [id]);

  /** The same scenario through each framework; `send` posts a raw body with headers. */
  async function scenario(consumer: string, send: (headers: Record<string, string>, body: string) => Promise<{ status: number; type: string; json: Record<string, unknown> }>) {
    const body = JSON.stringify({ amount: 42 });
    const id = `evt_${consumer}`;
    // Bad signature: 401 problem+json, and nothing recorded.
    const bad = await send(signed(id, body, { key: 'whsec_' + randomBytes(24).toString('base64') }), body);
    expect(bad.status).toBe(401);
    expect(bad.type).toMatch(/application\/problem\+json/);
    expect(bad.json).toMatchObject({ status: 401, reason: 'bad-signature' });
    const stale = await send(signed(id, body, { at: nowSec() - 3600 }), body);
    expect(stale.status).toBe(401);
    expect(stale.json.reason).toBe('stale-timestamp');
    expect(await records(consumer)).toBe(0);
    expect(await effectsOf(id)).toBe(0);
    // onEvent throws: 5xx, nothing recorded, the sender's retry processes it.
    failNext = true;
    expect((await send(signed(id, body), body)).status).toBe(500);
    expect(await records(consumer)).toBe(0);
    expect(await effectsOf(id)).toBe(0);
    const first = await send(signed(id, body), body);
    expect(first).toMatchObject({ status: 200, json: { id, status: 'processed' } });
    // A duplicate (retried with a fresh timestamp and signature, as senders do): 2xx, no effect.
    const again = await send(signed(id, body), body);
    expect(again).toMatchObject({ status: 200, json: { id, status: 'duplicate' } });
    expect(await effectsOf(id)).toBe(1);
    expect(await records(consumer)).toBe(1);
  }

  it('Web handler through Hono’s app.request()', async () => {
    const app = new Hono();
    const handle = webhookHandler(options('hono'));
    app.post('/hooks', (c) => handle(c.req.raw));
    await scenario('hono', async (headers, body) => {
      const res = await app.request('/hooks', { method: 'POST', headers, body });
      return { status: res.status, type: res.headers.get('content-type') ?? '', json: (await res.json()) as Record<string, unknown> };
    });
  });

  it('Fastify route in its own raw-body scope (fastify.inject); JSON routes elsewhere keep parsing', async () => {
    const app = Fastify();
    app.post('/json', async (request) => ({ parsed: request.body }));
    webhookFastify(app as unknown as FastifyLikeInstance, '/hooks', options('fastify'));
    await app.ready();
    try {
      await scenario('fastify', async (headers, body) => {
        const res = await app.inject({ method: 'POST', url: '/hooks', headers, payload: body });
        return { status: res.statusCode, type: String(res.headers['content-type']), json: res.json() };
      });
      const json = await app.inject({ method: 'POST', url: '/json', payload: { a: 1 } });
      expect(json.json()).toEqual({ parsed: { a: 1 } });
    } finally {
      await app.close();
    }
  });

  it.each([
    ['express', express],
    ['express4', express4],
  ] as const)('%s middleware behind express.raw() on a real port; without the raw body it names express.raw', async (name, lib) => {
    const app = lib();
    app.post('/hooks', lib.raw({ type: '*/*' }), webhookExpress(options(name)));
    app.post('/parsed', lib.json(), webhookExpress(options(`${name}-parsed`)));
    app.use((error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).json({ error: error.message, code: (error as { code?: string }).code });
    });
    const server = app.listen(0);
    await new Promise((resolve) => server.once('listening', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      await scenario(name, async (headers, body) => {
        const res = await fetch(`${base}/hooks`, { method: 'POST', headers, body });
        return { status: res.status, type: res.headers.get('content-type') ?? '', json: (await res.json()) as Record<string, unknown> };
      });
      const body = JSON.stringify({ amount: 1 });
      const res = await fetch(`${base}/parsed`, { method: 'POST', headers: signed(`evt_${name}_parsed`, body), body });
      const answer = (await res.json()) as { error: string; code: string };
      expect(answer.code).toBe('ERR_IDEMKIT_WEBHOOK_RAW_BODY');
      expect(answer.error).toMatch(/express\.raw/);
      expect(await records(`${name}-parsed`)).toBe(0);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('processes concurrent retries of one event once', async () => {
    const handle = webhookHandler(options('race'));
    const body = JSON.stringify({ amount: 7 });
    const responses = await Promise.all(
      Array.from({ length: 10 }, () => handle(new Request('http://x/hooks', { method: 'POST', headers: signed('evt_race', body), body }))),
    );
    const statuses = await Promise.all(responses.map(async (r) => ((await r.json()) as { status: string }).status));
    expect(statuses.filter((s) => s === 'processed')).toHaveLength(1);
    expect(statuses.filter((s) => s === 'duplicate')).toHaveLength(9);
    expect(await effectsOf('evt_race')).toBe(1);
  });

  it('validates its options eagerly', () => {
    expect(() => webhookHandler({ ...options('x'), consumer: '' })).toThrow(/`consumer`/);
    expect(() => webhookHandler({ ...options('x'), secret: 'whsec_***' })).toThrow(/`secret`/);
    expect(() => webhookHandler({ ...options('x'), onEvent: undefined as never })).toThrow(/`onEvent`/);
    expect(() => webhookHandler({ ...options('x'), maxBodyBytes: -1 })).toThrow(/`maxBodyBytes`/);
    expect(() => webhookHandler({ ...options('x'), secrets: [secret] } as never)).toThrow(/`secrets`.*use `secret`/);
  });
});
