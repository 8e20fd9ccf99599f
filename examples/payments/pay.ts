/**
 * POST /orders/:id/pay as recovery phases (idemkit/patterns `definePhases`). A call to a foreign
 * system cannot sit inside our database transaction, so the request is cut into phases, each
 * committing its writes together with the record's recovery point (fenced by the owner token):
 *
 *   started          (recorded by idemkit) the input: which order
 *   payment_started  local: the payment row, insert-once per order, with the channel's key
 *   channel_called   foreign: the channel charges with that key and answers its transaction id
 *   finished         local: the payment row records the transaction; the 202 body
 *
 * A retry that takes the record over resumes after the last committed phase; the completer does
 * the same for a record whose client never came back. The channel key is derived from our record
 * (`foreignKeyFor(scope, key, 'charge')`) and kept on the payment row, so every attempt, whoever
 * makes it, and even a payment of the same order under another Idempotency-Key, asks the channel
 * with the same key: the channel charges once.
 */
import { createIdempotentFetch } from 'idemkit/client';
import { definePhases, foreignKeyFor, insertOnce } from 'idemkit/patterns';
import type { PaymentsDb } from './db.js';
import type { OrderRow } from './orders.js';
import { crashPoint } from './problem.js';

export interface PayInput {
  readonly orderId: string;
}

export interface PayResult {
  readonly orderId: string;
  readonly status: 'PENDING';
  readonly channelTxnId: string;
  /** Where this run resumed (null: it ran from the start). */
  readonly resumedFrom: string | null;
}

export interface PayDeps {
  readonly db: PaymentsDb;
  readonly channelUrl: string;
  readonly notifyUrl: string;
  /** Per-attempt timeout of a channel call, in ms: shorter than the channel's late answers. */
  readonly channelTimeoutMs: number;
}

/** The channel's key for a payment first made under (scope, key). */
export const channelKeyFor = (scope: string, key: string) => `pay_${foreignKeyFor(scope, key, 'charge')}`;

export function payPhases(deps: PayDeps) {
  const { db } = deps;
  const { t } = db;
  // idemkit/client on the way out too: the channel key on every attempt, a timed-out attempt retried.
  const channelFetch = createIdempotentFetch({
    attemptTimeout: deps.channelTimeoutMs,
    retries: 5,
    minTimeout: 20,
    maxTimeout: 300,
    throwOnError: true,
    retryBudget: false, // bounded retries per call; a shared budget would couple unrelated payments
  });

  return definePhases<PayInput, unknown>('payments.pay')
    .phase('payment_started', async ({ tx, input, scope, key, resumed }) => {
      const { row } = await insertOnce<{ channel_key: string }>(db.joined(tx), {
        table: t.payments,
        values: { order_id: input.orderId, channel_key: channelKeyFor(scope, key), status: 'STARTED', updated_at: Date.now() },
        conflict: ['order_id'],
      });
      return { channelKey: row.channel_key, resumed };
    })
    .foreign('channel_called', async ({ input, data, resumed }) => {
      const order = (await db.sql.query<OrderRow>(`SELECT * FROM ${t.orders} WHERE id = ?`, [input.orderId])).rows[0]!;
      const response = await channelFetch(`${deps.channelUrl}/charges`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ orderId: order.id, amount: Number(order.amount), notifyUrl: deps.notifyUrl }),
        idempotencyKey: data.payment_started.channelKey,
      });
      const { txnId } = (await response.json()) as { txnId: string };
      crashPoint('pay_phase_2'); // the channel charged; our record still says payment_started
      return { txnId, resumed };
    })
    .phase('finished', async ({ tx, input, data, resumed }): Promise<PayResult> => {
      await db.joined(tx).query(
        `UPDATE ${t.payments} SET channel_txn_id = ?, status = 'SUBMITTED', updated_at = ? WHERE order_id = ? AND status = 'STARTED'`,
        [data.channel_called.txnId, Date.now(), input.orderId],
      );
      // The first phase that ran in this process tells where it resumed.
      const resumedFrom = resumed ? (!data.payment_started.resumed ? (!data.channel_called.resumed ? 'channel_called' : 'payment_started') : 'started') : null;
      return { orderId: input.orderId, status: 'PENDING', channelTxnId: data.channel_called.txnId, resumedFrom };
    });
}

export type PayPhases = ReturnType<typeof payPhases>;
