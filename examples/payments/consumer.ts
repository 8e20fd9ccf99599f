/**
 * The consumer of "order paid" messages: ships the order and moves its stock from reserved to
 * sold. At-least-once delivery means every message may arrive several times, in any order;
 * consume-once records the message id in the same transaction as these writes, so a duplicate
 * finds the record and changes nothing (seed 1: "去重记录必须与业务写库在同一个事务").
 */
import type { SqlExecutor } from 'idemkit/patterns';
import { consumeOnce } from 'idemkit/messaging';
import { ORDER_STATES } from './orders.js';
import type { TableNames } from './schema.js';
import { retryOnVersionConflict, transition, versionedUpdate } from 'idemkit/patterns';

export const SHIPPING_CONSUMER = 'shipping';

export interface OrderPaid {
  readonly messageId: string;
  readonly orderId: string;
  readonly clientOrderNo?: string;
}

/** The consumer's writes, inside the transaction that also records the message id. */
export async function shipInTx(tx: SqlExecutor, t: TableNames, orderId: string): Promise<'shipped' | 'not-paid'> {
  // The state machine is a second guard: a message for an order that is not PAID changes nothing.
  const moved = await transition(tx, { table: t.orders, where: { id: orderId }, from: 'PAID', to: 'SHIPPED', set: { shipped_at: Date.now() }, machine: ORDER_STATES });
  if (!moved.changed) return 'not-paid';
  const order = (await tx.query<{ sku: string; quantity: number }>(`SELECT sku, quantity FROM ${t.orders} WHERE id = ?`, [orderId])).rows[0]!;
  await commitStock(tx, t, order.sku, Number(order.quantity));
  return 'shipped';
}

/** reserved → sold, as an optimistic versioned update (retried when another writer got there first). */
async function commitStock(tx: SqlExecutor, t: TableNames, sku: string, quantity: number): Promise<void> {
  await retryOnVersionConflict(
    async () => {
      const inv = (await tx.query<{ reserved: number; sold: number; version: number }>(`SELECT reserved, sold, version FROM ${t.inventory} WHERE sku = ?`, [sku])).rows[0]!;
      const result = await versionedUpdate(tx, {
        table: t.inventory,
        where: { sku },
        expected: Number(inv.version),
        set: { reserved: Number(inv.reserved) - quantity, sold: Number(inv.sold) + quantity },
      });
      return result; // updated: false is a conflict: retryOnVersionConflict re-reads and tries again
    },
    { retries: 20 },
  );
}

/**
 * One delivery. `broken: true` is the anti-pattern the tests must catch: no consume-once and no
 * state check, so a redelivered message ships and books stock again.
 */
export async function handleOrderPaid(db: SqlExecutor, t: TableNames, message: OrderPaid, broken = false): Promise<'processed' | 'duplicate'> {
  if (broken) {
    await db.transaction(async (tx) => {
      const order = (await tx.query<{ sku: string; quantity: number }>(`SELECT sku, quantity FROM ${t.orders} WHERE id = ?`, [message.orderId])).rows[0]!;
      await tx.query(`UPDATE ${t.orders} SET status = 'SHIPPED', shipped_at = ? WHERE id = ?`, [Date.now(), message.orderId]);
      await commitStock(tx, t, order.sku, Number(order.quantity));
    });
    return 'processed';
  }
  const result = await consumeOnce({ db, consumer: SHIPPING_CONSUMER, messageId: message.messageId, table: t.processed }, (tx) =>
    shipInTx(tx, t, message.orderId),
  );
  return result.status;
}
