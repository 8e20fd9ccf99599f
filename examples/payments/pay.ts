/**
 * POST /orders/:id/pay in recovery phases. Calling a foreign system cannot sit inside our database
 * transaction, so the request is cut into phases, each leaving a recovery point on the
 * idempotency record (a fenced checkpoint):
 *
 *   started         the payment row exists (insert-once per order) with the channel's key
 *   channel_called  the channel answered with its transaction id
 *   finished        the payment row records the transaction; the 202 is stored as the result
 *
 * A retry after a crash takes the record over and resumes at the last point; the completer does
 * the same for a record whose client never came back. The channel key is derived from our record
 * and kept on the payment row, so every attempt, whoever makes it, asks the channel with the same
 * key and the channel charges once.
 */
import { createHash } from 'node:crypto';
import type { SqlExecutor } from 'idemkit/patterns';
import { createIdempotentFetch } from 'idemkit/client';
import type { OrderRow } from './orders.js';
import type { TableNames } from './schema.js';
import { insertOnce } from './guards.js';
import type { Answer } from './problem.js';
import { crashPoint, problem } from './problem.js';

export interface PayState {
  readonly kind: 'pay';
  readonly orderId: string;
  readonly channelKey: string;
  readonly txnId?: string;
}

export interface PayContext {
  readonly scope: string;
  readonly key: string;
  readonly orderId: string;
  /** The recovery data of the last committed phase, when resuming. */
  readonly resume: PayState | undefined;
  readonly resumeFrom: string | undefined;
  checkpoint(point: string, data: PayState): Promise<void>;
}

export interface PayDeps {
  readonly db: SqlExecutor;
  readonly t: TableNames;
  readonly channelUrl: string;
  readonly notifyUrl: string;
  /** Per-attempt timeout of a channel call, in ms: shorter than the channel's late answers. */
  readonly channelTimeoutMs: number;
}

/** The channel's key: derived from our idempotency record (scope, key), never random per attempt. */
export function channelKeyFor(scope: string, key: string): string {
  return `pay_${createHash('sha256').update(`${scope}\n${key}`).digest('hex').slice(0, 40)}`;
}

export function payer(deps: PayDeps) {
  const { db, t } = deps;
  // idemkit/client on the way out too: the channel key on every attempt, a timed-out attempt retried.
  const channelFetch = createIdempotentFetch({
    attemptTimeout: deps.channelTimeoutMs,
    retries: 5,
    minTimeout: 20,
    maxTimeout: 300,
    throwOnError: true,
    retryBudget: false, // one caller, bounded retries; a shared budget would couple unrelated payments
  });

  async function callChannel(state: PayState, order: OrderRow): Promise<string> {
    const response = await channelFetch(`${deps.channelUrl}/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ orderId: order.id, amount: Number(order.amount), notifyUrl: deps.notifyUrl }),
      idempotencyKey: state.channelKey,
    });
    const { txnId } = (await response.json()) as { txnId: string };
    return txnId;
  }

  return async function pay(ctx: PayContext): Promise<Answer & { invalid?: boolean }> {
    const order = (await db.query<OrderRow>(`SELECT * FROM ${t.orders} WHERE id = ?`, [ctx.orderId])).rows[0];
    if (!order || order.tenant !== ctx.scope) return { ...problem(404, 'order-not-found', 'Order not found', `No order ${ctx.orderId}.`), invalid: true };
    let state = ctx.resume;
    if (!state && order.status !== 'UNPAID') return { status: 200, body: { orderId: order.id, status: order.status } };

    if (!state) {
      // Phase 1. An order that already has a payment row (another key paid it) keeps that row's key.
      const { row } = await insertOnce<{ channel_key: string }>(db, {
        table: t.payments,
        values: { order_id: order.id, channel_key: channelKeyFor(ctx.scope, ctx.key), status: 'STARTED', updated_at: Date.now() },
        conflict: ['order_id'],
      });
      state = { kind: 'pay', orderId: order.id, channelKey: row.channel_key };
      await ctx.checkpoint('started', state);
    }
    if (!state.txnId) {
      // Phase 2: the foreign call, with the channel's own idempotency key.
      const txnId = await callChannel(state, order);
      crashPoint('pay_phase_2');
      state = { ...state, txnId };
      await ctx.checkpoint('channel_called', state);
    }
    // Phase 3.
    await db.query(`UPDATE ${t.payments} SET channel_txn_id = ?, status = 'SUBMITTED', updated_at = ? WHERE order_id = ? AND status = 'STARTED'`, [
      state.txnId,
      Date.now(),
      order.id,
    ]);
    return { status: 202, body: { orderId: order.id, status: 'PENDING', channelTxnId: state.txnId, resumedFrom: ctx.resumeFrom ?? null } };
  };
}
