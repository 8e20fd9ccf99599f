/**
 * The service's tables, for SQLite and PostgreSQL. Every name carries a prefix so that tests on a
 * shared PostgreSQL server never meet each other's rows.
 *
 * Where each guard lives (see docs/payments-walkthrough.md):
 * - orders.client_order_no UNIQUE       insert-once on the client's order number
 * - orders.status CHECK                 the UNPAID → PAID → SHIPPED state machine
 * - inventory.version                   optimistic versioned updates of stock
 * - payments.order_id PRIMARY KEY       one channel key per order, whatever the HTTP key
 * - payment_flows.channel_txn_id PK     a channel callback is applied once
 * - ledger.channel_txn_id UNIQUE        one ledger entry per channel transaction
 * - outbox.message_id UNIQUE            the "order paid" event, written in the payment's transaction
 * - processed_messages (consumer, id)   consume-once (idemkit/messaging)
 * - idempotency_records                 the HTTP Idempotency-Key records (the idemkit store)
 */
export type Dialect = 'sqlite' | 'postgres';

export interface TableNames {
  readonly inventory: string;
  readonly orders: string;
  readonly payments: string;
  readonly flows: string;
  readonly ledger: string;
  readonly outbox: string;
  readonly processed: string;
  readonly idempotency: string;
}

export function tableNames(prefix: string): TableNames {
  if (!/^[a-z_][a-z0-9_]*$/.test(prefix) && prefix !== '') throw new Error(`table prefix must be a lower-case identifier, got ${prefix}`);
  return {
    inventory: `${prefix}inventory`,
    orders: `${prefix}orders`,
    payments: `${prefix}payments`,
    flows: `${prefix}payment_flows`,
    ledger: `${prefix}ledger`,
    outbox: `${prefix}outbox`,
    processed: `${prefix}processed_messages`,
    idempotency: `${prefix}idempotency_records`,
  };
}

/** The catalogue the service starts with (seeded insert-once, so a restart never resets stock). */
export const CATALOGUE = [
  { sku: 'sku-coffee', name: 'Coffee beans 1 kg', price: 2_400, stock: 5_000 },
  { sku: 'sku-mug', name: 'Mug', price: 900, stock: 5_000 },
  { sku: 'sku-grinder', name: 'Hand grinder', price: 8_900, stock: 2_000 },
] as const;

/** CREATE statements for the business tables (the store and consumeOnce migrate their own). */
export function schemaSql(dialect: Dialect, t: TableNames): string[] {
  const serial = dialect === 'postgres' ? 'BIGSERIAL PRIMARY KEY' : 'INTEGER PRIMARY KEY AUTOINCREMENT';
  return [
    `CREATE TABLE IF NOT EXISTS ${t.inventory} (
      sku TEXT PRIMARY KEY,
      name TEXT NOT NULL,
      price INTEGER NOT NULL CHECK (price > 0),
      initial INTEGER NOT NULL,
      available INTEGER NOT NULL CHECK (available >= 0),
      reserved INTEGER NOT NULL CHECK (reserved >= 0),
      sold INTEGER NOT NULL CHECK (sold >= 0),
      version INTEGER NOT NULL
    )`,
    `CREATE TABLE IF NOT EXISTS ${t.orders} (
      id TEXT PRIMARY KEY,
      client_order_no TEXT NOT NULL UNIQUE,
      tenant TEXT NOT NULL,
      sku TEXT NOT NULL REFERENCES ${t.inventory} (sku),
      quantity INTEGER NOT NULL CHECK (quantity > 0),
      amount INTEGER NOT NULL CHECK (amount > 0),
      status TEXT NOT NULL CHECK (status IN ('UNPAID', 'PAID', 'SHIPPED')),
      created_at BIGINT NOT NULL,
      paid_at BIGINT,
      shipped_at BIGINT
    )`,
    `CREATE TABLE IF NOT EXISTS ${t.payments} (
      order_id TEXT PRIMARY KEY REFERENCES ${t.orders} (id),
      channel_key TEXT NOT NULL UNIQUE,
      channel_txn_id TEXT,
      status TEXT NOT NULL CHECK (status IN ('STARTED', 'SUBMITTED')),
      updated_at BIGINT NOT NULL
    )`,
    `CREATE TABLE IF NOT EXISTS ${t.flows} (
      channel_txn_id TEXT PRIMARY KEY,
      order_id TEXT NOT NULL,
      amount INTEGER NOT NULL,
      outcome TEXT NOT NULL CHECK (outcome IN ('APPLIED', 'REJECTED', 'SECOND_PAYMENT')),
      received_at BIGINT NOT NULL
    )`,
    `CREATE TABLE IF NOT EXISTS ${t.ledger} (
      id TEXT PRIMARY KEY,
      channel_txn_id TEXT NOT NULL UNIQUE,
      order_id TEXT NOT NULL REFERENCES ${t.orders} (id),
      amount INTEGER NOT NULL,
      created_at BIGINT NOT NULL
    )`,
    `CREATE TABLE IF NOT EXISTS ${t.outbox} (
      seq ${serial},
      message_id TEXT NOT NULL UNIQUE,
      topic TEXT NOT NULL,
      payload TEXT NOT NULL,
      published INTEGER NOT NULL DEFAULT 0,
      deliveries INTEGER NOT NULL DEFAULT 0,
      created_at BIGINT NOT NULL
    )`,
  ];
}

/** Removes every table of this prefix (PostgreSQL tests; the store's claim function too). */
export function dropSql(dialect: Dialect, t: TableNames): string[] {
  const cascade = dialect === 'postgres' ? ' CASCADE' : '';
  const out = [t.outbox, t.ledger, t.flows, t.payments, t.orders, t.inventory, t.processed, t.idempotency].map(
    (name) => `DROP TABLE IF EXISTS ${name}${cascade}`,
  );
  if (dialect === 'postgres') out.push(`DROP FUNCTION IF EXISTS ${t.idempotency}_claim CASCADE`);
  return out;
}
