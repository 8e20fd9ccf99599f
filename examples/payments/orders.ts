/**
 * POST /orders, inside the transaction the idempotency middleware opened: the order (insert-once
 * on the client's order number), the stock reservation (versioned update) and the idempotency
 * record all commit together, or not at all.
 */
import { randomUUID } from 'node:crypto';
import type { SqlExecutor } from 'idemkit/patterns';
import type { TableNames } from './schema.js';
import { insertOnce, retryOnVersionConflict, stateMachine, versionedUpdate } from 'idemkit/patterns';
import type { Answer } from './problem.js';
import { problem, ProblemError } from './problem.js';

/** The order's lifecycle: every status change goes through `transition(…, { machine })`. */
export const ORDER_STATES = stateMachine({ UNPAID: ['PAID'], PAID: ['SHIPPED'], SHIPPED: [] });

export interface OrderRow {
  id: string;
  client_order_no: string;
  tenant: string;
  sku: string;
  quantity: number;
  amount: number;
  status: string;
}

export const orderView = (row: OrderRow) => ({
  id: row.id,
  clientOrderNo: row.client_order_no,
  sku: row.sku,
  quantity: Number(row.quantity),
  amount: Number(row.amount),
  status: row.status,
});

/**
 * Validation answers mean "nothing happened": the caller discards the idempotency claim, so the
 * same key can be used again once the request is fixed (Stripe's advice for 4xx).
 */
export async function createOrder(tx: SqlExecutor, t: TableNames, tenant: string, body: unknown): Promise<Answer & { invalid?: boolean }> {
  const invalid = (a: Answer) => ({ ...a, invalid: true });
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return invalid(problem(400, 'invalid-body', 'Invalid body', 'The body must be a JSON object.'));
  const { clientOrderNo, sku, quantity, amount } = body as Record<string, unknown>;
  if (typeof clientOrderNo !== 'string' || !/^[A-Za-z0-9_.:-]{1,64}$/.test(clientOrderNo)) {
    return invalid(problem(422, 'invalid-client-order-no', 'Invalid client order number', '`clientOrderNo` must be 1–64 characters of [A-Za-z0-9_.:-].'));
  }
  if (!Number.isSafeInteger(quantity) || (quantity as number) < 1) return invalid(problem(422, 'invalid-quantity', 'Invalid quantity', '`quantity` must be a positive integer.'));
  if (!Number.isSafeInteger(amount) || (amount as number) <= 0) return invalid(problem(422, 'invalid-amount', 'Invalid amount', '`amount` must be a positive integer (minor units).'));
  if (typeof sku !== 'string') return invalid(problem(422, 'unknown-product', 'Unknown product', '`sku` must name a product.'));
  const product = (await tx.query<{ price: number; available: number }>(`SELECT price, available FROM ${t.inventory} WHERE sku = ?`, [sku])).rows[0];
  if (!product) return invalid(problem(422, 'unknown-product', 'Unknown product', `There is no product ${sku}.`));
  const q = quantity as number;
  if (amount !== Number(product.price) * q) {
    return invalid(problem(422, 'amount-mismatch', 'Amount does not match', `${q} × ${product.price} is ${Number(product.price) * q}, not ${String(amount)}.`));
  }
  if (q > Number(product.available)) return invalid(problem(409, 'insufficient-stock', 'Insufficient stock', `Only ${product.available} of ${sku} are available.`));

  const { inserted, row } = await insertOnce<OrderRow>(tx, {
    table: t.orders,
    values: { id: `ord_${randomUUID()}`, client_order_no: clientOrderNo, tenant, sku, quantity: q, amount, status: 'UNPAID', created_at: Date.now() },
    conflict: ['client_order_no'],
  });
  if (!inserted) {
    // The business key already exists (a retry that came with a new Idempotency-Key): the order
    // is already done; answer it instead of creating a second one (seed 2, 方案一).
    if (row.tenant !== tenant || row.sku !== sku || Number(row.quantity) !== q) {
      return invalid(problem(409, 'client-order-no-taken', 'Client order number already used', `Order number ${clientOrderNo} belongs to a different order.`));
    }
    return { status: 200, body: orderView(row) };
  }
  await reserve(tx, t, sku, q);
  return { status: 201, body: orderView(row) };
}

/** available → reserved, as an optimistic versioned update; retried when another order got there first. */
async function reserve(tx: SqlExecutor, t: TableNames, sku: string, quantity: number): Promise<void> {
  await retryOnVersionConflict(
    async () => {
      const inv = (await tx.query<{ available: number; reserved: number; version: number }>(
        `SELECT available, reserved, version FROM ${t.inventory} WHERE sku = ?`,
        [sku],
      )).rows[0]!;
      if (Number(inv.available) < quantity) {
        // Another order took the stock since we looked: roll everything back, answer 409.
        throw new ProblemError(problem(409, 'insufficient-stock', 'Insufficient stock', `Only ${inv.available} of ${sku} are available.`));
      }
      const result = await versionedUpdate(tx, {
        table: t.inventory,
        where: { sku },
        expected: Number(inv.version),
        set: { available: Number(inv.available) - quantity, reserved: Number(inv.reserved) + quantity },
      });
      return result; // updated: false is a conflict: retryOnVersionConflict re-reads and tries again
    },
    { retries: 20 },
  );
}
