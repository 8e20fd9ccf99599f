/**
 * The bench's own tables and schemas in the shared PostgreSQL database, named so they never meet
 * a test's: created before the runs, emptied before each run, dropped at the end.
 */
import pg from 'pg';

export const ORDERS_TABLE = 'idemkit_recovery_orders';
/** idemkit's record table (its claim function is `<table>_claim`). */
export const IDEMKIT_TABLE = 'idemkit_recovery_records';
/** DBOS's system database lives in this schema of the same database. */
export const DBOS_SCHEMA = 'idemkit_recovery_dbos';
/**
 * The knex datasource keeps its transaction checkpoints in `dbos.transaction_completion`: 4.5.13
 * reads them from the schema `dbos` whatever schema it is given, so the bench cannot rename it.
 * It is dropped at the end when the bench created it, and only the bench's rows are deleted otherwise.
 */
export const KNEX_SCHEMA = 'dbos';

/** One order as the database has it after a run. */
export interface OrderRow {
  /** Rows with this order id: more than one is a local write done twice. */
  readonly rows: number;
  /** How many times the charge was recorded: more than one is a local write done twice. */
  readonly charged: number;
  readonly chargeId: string | null;
  /** When the final local write ran (epoch ms, the server's clock: the same machine as the driver's). */
  readonly chargedAt: number | null;
}

export class BenchDatabase {
  readonly pool: pg.Pool;
  private knexSchemaExisted = true;

  constructor(readonly url: string) {
    this.pool = new pg.Pool({ connectionString: url, max: 2 });
    this.pool.on('error', () => {});
  }

  async setUp(): Promise<void> {
    const { rows } = await this.pool.query<{ exists: boolean }>('SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS exists', [KNEX_SCHEMA]);
    this.knexSchemaExisted = rows[0]!.exists;
    // No unique index on purpose: an order created twice shows as a second row, not as an error.
    await this.pool.query(`CREATE TABLE IF NOT EXISTS ${ORDERS_TABLE} (order_id text NOT NULL, amount integer NOT NULL, charge_id text, charged integer NOT NULL DEFAULT 0, charged_at timestamptz);
                           CREATE INDEX IF NOT EXISTS ${ORDERS_TABLE}_order_id ON ${ORDERS_TABLE} (order_id)`);
  }

  /** Before each run: no orders, no records, no workflows (each app creates its own state again at start). */
  async reset(prefix: string): Promise<void> {
    await this.pool.query(`TRUNCATE ${ORDERS_TABLE}`);
    await this.dropState(prefix);
  }

  async dropState(prefix: string): Promise<void> {
    await this.pool.query(`DROP TABLE IF EXISTS ${IDEMKIT_TABLE} CASCADE; DROP FUNCTION IF EXISTS ${IDEMKIT_TABLE}_claim CASCADE; DROP SCHEMA IF EXISTS ${DBOS_SCHEMA} CASCADE`);
    if (await this.exists(`${KNEX_SCHEMA}.transaction_completion`)) {
      await this.pool.query(`DELETE FROM ${KNEX_SCHEMA}.transaction_completion WHERE workflow_id LIKE $1`, [`${prefix}%`]);
    }
  }

  async orders(prefix: string): Promise<Map<string, OrderRow>> {
    const { rows } = await this.pool.query<{ order_id: string; rows: number; charged: number; charge_id: string | null; charged_at: string | null }>(
      `SELECT order_id, count(*)::int AS rows, sum(charged)::int AS charged, max(charge_id) AS charge_id, (extract(epoch FROM max(charged_at)) * 1000)::float8 AS charged_at
         FROM ${ORDERS_TABLE} WHERE order_id LIKE $1 GROUP BY order_id`,
      [`${prefix}%`],
    );
    return new Map(rows.map((r) => [r.order_id, { rows: r.rows, charged: r.charged, chargeId: r.charge_id, chargedAt: r.charged_at === null ? null : Number(r.charged_at) }]));
  }

  async tearDown(prefix: string): Promise<void> {
    await this.pool.query(`DROP TABLE IF EXISTS ${ORDERS_TABLE}`);
    await this.dropState(prefix);
    if (!this.knexSchemaExisted) await this.pool.query(`DROP SCHEMA IF EXISTS ${KNEX_SCHEMA} CASCADE`);
    await this.pool.end();
  }

  private async exists(relation: string): Promise<boolean> {
    const { rows } = await this.pool.query<{ found: string | null }>('SELECT to_regclass($1)::text AS found', [relation]);
    return rows[0]!.found !== null;
  }
}
