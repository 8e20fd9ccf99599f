/**
 * Applying a successful charge: the channel's notification (POST /callbacks/channel) and the
 * completer's active query both end here. One transaction:
 *   1. insert-once on the channel transaction id (payment_flows): a duplicate stops here;
 *   2. the UNPAID → PAID transition (a conditional update, never read-then-write);
 *   3. one ledger entry, and the "order paid" message in the outbox.
 * A crash anywhere inside rolls all of it back; the channel's resend then applies it once.
 */
import { randomUUID } from 'node:crypto';
import type { SqlExecutor } from 'idemkit/patterns';
import type { TableNames } from './schema.js';
import { insertOnce, transition } from 'idemkit/patterns';
import { ORDER_STATES } from './orders.js';
import { crashPoint } from './problem.js';

export interface ChargeSucceeded {
  readonly txnId: string;
  readonly orderId: string;
  readonly amount: number;
}

export type SettleOutcome = 'applied' | 'duplicate' | 'rejected' | 'second-payment';

export function settle(db: SqlExecutor, t: TableNames, charge: ChargeSucceeded): Promise<SettleOutcome> {
  return db.transaction(async (tx) => {
    const now = Date.now();
    const flow = await insertOnce(tx, {
      table: t.flows,
      values: { channel_txn_id: charge.txnId, order_id: charge.orderId, amount: charge.amount, outcome: 'APPLIED', received_at: now },
      conflict: ['channel_txn_id'],
    });
    if (!flow.inserted) return 'duplicate';
    const order = (await tx.query<{ amount: number; client_order_no: string }>(`SELECT amount, client_order_no FROM ${t.orders} WHERE id = ?`, [charge.orderId])).rows[0];
    const mark = (outcome: string) => tx.query(`UPDATE ${t.flows} SET outcome = ? WHERE channel_txn_id = ?`, [outcome, charge.txnId]);
    if (!order || Number(order.amount) !== charge.amount) {
      await mark('REJECTED'); // kept, so reconciliation sees money we could not match
      return 'rejected';
    }
    const moved = await transition(tx, { table: t.orders, where: { id: charge.orderId }, from: 'UNPAID', to: 'PAID', set: { paid_at: now }, machine: ORDER_STATES });
    if (!moved.changed) {
      // A second, different channel transaction for a paid order: money to refund, never a second PAID.
      await mark('SECOND_PAYMENT');
      return 'second-payment';
    }
    crashPoint('after_transition');
    await tx.query(`INSERT INTO ${t.ledger} (id, channel_txn_id, order_id, amount, created_at) VALUES (?, ?, ?, ?, ?)`, [
      `led_${randomUUID()}`,
      charge.txnId,
      charge.orderId,
      charge.amount,
      now,
    ]);
    const messageId = `order-paid:${charge.orderId}`;
    await tx.query(`INSERT INTO ${t.outbox} (message_id, topic, payload, created_at) VALUES (?, ?, ?, ?)`, [
      messageId,
      'order.paid',
      JSON.stringify({ messageId, orderId: charge.orderId, clientOrderNo: order.client_order_no }),
      now,
    ]);
    return 'applied';
  });
}
