// Opens a MySQL or MariaDB store for the store commands: a small pool, proved to answer before use.
import { StoreSchemaMissingError } from '../../core/errors.js';
import type { MysqlPool } from '../../drivers/mysql.js';
import type { StoreNames, StoreUrl } from '../store-url.js';
import type { OpenedStore } from './driver.js';
import { CONNECT_TIMEOUT_MS, importDriver, reachable, refuseNames, storeLogger } from './driver.js';

// What the CLI uses of mysql2, declared here so that nothing imports the driver's types.
interface Mysql2PromiseModule {
  createPool(config: object): MysqlPool & { query(sql: string): Promise<unknown>; end(): Promise<void> };
}

export async function openMysql(url: StoreUrl, names: StoreNames): Promise<OpenedStore> {
  refuseNames(url, names, ['table']);
  const mysql = await importDriver<Mysql2PromiseModule>('mysql', (name) => import(`${name}/promise`));
  const { mysqlStore } = await import('../../stores/mysql/index.js');
  const pool = mysql.createPool({ uri: url.target, connectionLimit: 2, connectTimeout: CONNECT_TIMEOUT_MS });
  const { logger, quietly } = storeLogger();
  const store = await reachable(url, pool, () => mysqlStore({ pool, table: names.table, logger }), (error) => (error as Error).message || String((error as { code?: unknown }).code ?? error));
  const table = names.table ?? 'idempotency_records';
  return {
    url,
    store,
    where: `table ${table}`,
    async migrate() {
      let present = true;
      try {
        await quietly(() => store.verify());
      } catch (error) {
        if (!(error instanceof StoreSchemaMissingError)) throw error;
        // Missing columns alone (a table of an earlier idemkit) are what migrate adds.
        present = !error.missing.some((what) => what.startsWith('table '));
      }
      const added = await store.migrate();
      return present ? { created: [], present: [`table ${table}`], added } : { created: [`table ${table}`], present: [], added: [] };
    },
    verify: () => store.verify(),
    close: () => pool.end(),
  };
}
