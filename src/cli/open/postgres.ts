// Opens a PostgreSQL store for the store commands: a small pool, proved to answer before use.
import type { PostgresPool } from '../../drivers/postgres.js';
import type { StoreNames, StoreUrl } from '../store-url.js';
import type { OpenedStore } from './driver.js';
import { CONNECT_TIMEOUT_MS, missingParts, importDriver, reachable, refuseNames, storeLogger } from './driver.js';

// What the CLI uses of pg, declared here so that nothing imports the driver's types.
interface PgModule {
  default: { Pool: new (config: object) => PostgresPool & { on(event: 'error', listener: () => void): unknown; end(): Promise<void> } };
}

export async function openPostgres(url: StoreUrl, names: StoreNames): Promise<OpenedStore> {
  refuseNames(url, names, ['table', 'schema']);
  const { default: pg } = await importDriver<PgModule>('postgres');
  const { postgresStore } = await import('../../stores/postgres/index.js');
  const pool = new pg.Pool({ connectionString: url.target, max: 2, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
  pool.on('error', () => {});
  const { logger, quietly } = storeLogger();
  const store = await reachable(url, pool, () => postgresStore({ pool, table: names.table, schema: names.schema, logger }), (error) => (error as Error).message || String(error));
  const schema = names.schema ?? 'public';
  const table = names.table ?? 'idempotency_records';
  const missing = () => missingParts(store, (error) => [...error.missing]);
  return {
    url,
    store,
    where: `table ${schema}.${table}`,
    async migrate() {
      const before = await quietly(missing);
      const added = await store.migrate();
      const all = [`table ${schema}.${table}`, `function ${schema}.${table}_claim`];
      return { created: all.filter((what) => before.includes(what)), present: all.filter((what) => !before.includes(what)), added };
    },
    verify: () => store.verify(),
    close: () => pool.end(),
  };
}
