/**
 * The reference payments service: Fastify + idemkit end to end.
 *
 *   POST /orders               Idempotency-Key required; transactional mode (order + reservation + record in one transaction)
 *   POST /orders/:id/pay       Idempotency-Key required; recovery phases around the channel call
 *   GET  /orders/:id           read
 *   POST /callbacks/channel    the channel's signed notification (Standard Webhooks); insert-once on the channel txn id
 *
 * Authentication is a demo stand-in: `Authorization: Bearer <tenant name>`, any name accepted. The
 * tenant id is a hash of that bearer value (`tenantOf` from examples/store.ts), never the value
 * itself: it is the idempotency scope, stored in every record and shown by `idemkit list`,
 * `inspect` and `ui`, and the orders' tenant column. Two tenants never share a key (anti-pattern
 * "unscoped keys"). A real service verifies the token and uses the id of the account it belongs to.
 */
import Fastify from 'fastify';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { IdempotencyContext } from 'idemkit';
import { idempotency } from 'idemkit/fastify';
import { verifyWebhook, WebhookVerificationError } from 'idemkit/messaging';
import { instrumentStore, telemetryEvents } from 'idemkit/otel';
import type { PaymentsDb } from './db.js';
import { createOrder, orderView } from './orders.js';
import type { OrderRow } from './orders.js';
import type { PayPhases } from './pay.js';
import { payPhases } from './pay.js';
import type { Answer } from './problem.js';
import { tenantOf } from '../store.js';
import { crashAt, problem, ProblemError } from './problem.js';
import type { ChargeSucceeded } from './settle.js';
import { settle } from './settle.js';
import type { Telemetry } from './telemetry.js';

export interface ServiceConfig {
  readonly db: PaymentsDb;
  readonly channelUrl: string;
  /** Where the channel sends notifications (this service's /callbacks/channel). */
  readonly notifyUrl: string;
  /** Standard Webhooks secret shared with the channel. */
  readonly webhookSecret: string;
  /** Lease of an in-flight idempotency record; short in the demo so take-overs happen quickly. */
  readonly leaseMs: number;
  readonly channelTimeoutMs: number;
  /** Metrics: idemkit's store and decisions are recorded, and GET /metrics serves them. */
  readonly telemetry?: Telemetry;
}

declare module 'fastify' {
  interface FastifyRequest {
    tenant: string;
  }
}

function send(reply: FastifyReply, answer: Answer): FastifyReply {
  return reply
    .code(answer.status)
    .type(answer.problem ? 'application/problem+json' : 'application/json; charset=utf-8')
    .send(JSON.stringify(answer.body));
}

const die = () => process.kill(process.pid, 'SIGKILL');

export async function buildService(config: ServiceConfig): Promise<{ app: FastifyInstance; phases: PayPhases }> {
  const { db } = config;
  const { t } = db;
  const app = Fastify();
  app.decorateRequest('tenant', '');
  app.setErrorHandler((error, _request, reply) => {
    if (error instanceof ProblemError) return send(reply, error.answer);
    const status = (error as { statusCode?: number }).statusCode ?? 500;
    return send(reply, problem(status, status >= 500 ? 'internal' : 'bad-request', status >= 500 ? 'Internal error' : 'Bad request', (error as Error).message));
  });
  const phases = payPhases({ db, channelUrl: config.channelUrl, notifyUrl: config.notifyUrl, channelTimeoutMs: config.channelTimeoutMs });
  const { telemetry } = config;
  const common = {
    // Instrumented: a span and a latency point per store operation (spans go nowhere without a tracer SDK).
    store: telemetry ? instrumentStore(db.store, { meter: telemetry.meter }) : db.store,
    // Counters per outcome (executed, replayed, conflict, mismatch, rejected), completions, take-overs, lease losses.
    events: telemetry ? telemetryEvents({ meter: telemetry.meter }) : {},
    leaseMs: config.leaseMs,
    // Keys are remembered 24 h (Stripe); shorter than 16 characters is refused: no timestamps or counters.
    windowMs: 86_400_000,
    keyPolicy: { minLength: 16 },
    scope: (request: FastifyRequest) => request.tenant,
  };

  // Authentication runs before the idempotency hooks: a 401 never claims a key.
  const authenticate = async (request: FastifyRequest, reply: FastifyReply) => {
    const authorization = request.headers.authorization ?? '';
    const tenant = /^Bearer [A-Za-z0-9_-]{1,64}$/.test(authorization) ? tenantOf(authorization) : undefined;
    if (!tenant) return send(reply, problem(401, 'unauthenticated', 'Unauthenticated', 'Send Authorization: Bearer <tenant>.'));
    request.tenant = tenant;
  };

  // POST /orders: transactional mode. ctx.tx is the transaction the record completes in.
  await app.register(async (api) => {
    api.addHook('onRequest', authenticate);
    if (crashAt === 'after_commit') {
      // The first byte of the answer kills the process: the commit has happened, the client hears nothing.
      api.addHook('onRequest', async (_request, reply) => {
        reply.raw.writeHead = die as never;
      });
    }
    await api.register(idempotency, { ...common, transactional: true });
    api.post('/orders', async (request, reply) => {
      const ctx = request.idempotency as IdempotencyContext<unknown>;
      const answer = await createOrder(db.joined(ctx.tx), t, request.tenant, request.body);
      // Nothing happened: release the key so a corrected request may reuse it (no 4xx is stored).
      if (answer.invalid) ctx.discard();
      if (answer.status === 201) reply.header('location', `/orders/${(answer.body as { id: string }).id}`);
      return send(reply, answer);
    });
  });

  // POST /orders/:id/pay: a foreign call cannot sit in our transaction; recovery phases instead.
  await app.register(async (api) => {
    api.addHook('onRequest', authenticate);
    await api.register(idempotency, common);
    api.post<{ Params: { id: string } }>('/orders/:id/pay', async (request, reply) => {
      const ctx = request.idempotency!;
      if (!ctx.resumeFrom) {
        const order = (await db.sql.query<OrderRow>(`SELECT * FROM ${t.orders} WHERE id = ? AND tenant = ?`, [request.params.id, request.tenant])).rows[0];
        if (!order) {
          ctx.discard(); // nothing happened: the key stays free
          return send(reply, problem(404, 'order-not-found', 'Order not found', `No order ${request.params.id}.`));
        }
        if (order.status !== 'UNPAID') return send(reply, { status: 200, body: { orderId: order.id, status: order.status } });
      }
      // On a take-over, run() resumes after the recorded phase with the recorded input.
      const result = await phases.run(ctx, { orderId: request.params.id });
      return send(reply, { status: 202, body: result });
    });
    api.get<{ Params: { id: string } }>('/orders/:id', async (request, reply) => {
      const row = (await db.sql.query<OrderRow>(`SELECT * FROM ${t.orders} WHERE id = ? AND tenant = ?`, [request.params.id, request.tenant])).rows[0];
      return send(reply, row ? { status: 200, body: orderView(row) } : problem(404, 'order-not-found', 'Order not found', `No order ${request.params.id}.`));
    });
  });

  // The channel's notification: verify the signature on the raw bytes, then settle once.
  await app.register(async (hooks) => {
    hooks.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
    hooks.post('/callbacks/channel', async (request, reply) => {
      try {
        verifyWebhook(request.headers, request.body as Buffer, { secret: config.webhookSecret });
      } catch (error) {
        if (error instanceof WebhookVerificationError) return send(reply, problem(401, 'bad-signature', 'Unverified notification', error.message));
        throw error;
      }
      const event = JSON.parse((request.body as Buffer).toString('utf8')) as ChargeSucceeded & { type: string };
      if (event.type !== 'charge.succeeded') return send(reply, { status: 200, body: { ok: true, ignored: event.type } });
      const outcome = await settle(db.sql, t, { txnId: event.txnId, orderId: event.orderId, amount: event.amount });
      // A duplicate is a success for the channel: it must stop resending (seed 2, 状态机 + 唯一索引).
      return send(reply, { status: 200, body: { ok: true, outcome } });
    });
  });

  app.get('/health', async () => ({ ok: true }));
  if (telemetry) {
    // Prometheus scrapes the exporter's own handler, on the raw Node request and response.
    app.get('/metrics', (request, reply) => {
      reply.hijack();
      telemetry.scrape(request.raw, reply.raw);
    });
  }
  return { app, phases };
}
