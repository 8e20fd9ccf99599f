/**
 * The MySQL/MariaDB store against the reference model, on the shared server (127.0.0.1:3306,
 * database `test`, a table of its own).
 *
 * Time jumps: the store decides on the server's UTC_TIMESTAMP(3), which the session variable
 * `timestamp` sets (`SET timestamp = …` freezes NOW() and UTC_TIMESTAMP() for that session). The
 * store takes a pool, so it is given one whose every connection gets the model's time before the
 * store uses it: the server's clock is then exact and stands still between jumps.
 */
import { randomUUID } from 'node:crypto';
import { createPool } from 'mysql2/promise';
import { describe } from 'vitest';
import type { MysqlPool } from '../../../src/drivers/mysql.js';
import { mysqlStore } from '../../../src/stores/mysql/index.js';
import { MARIADB, requireService } from '../../support/services.js';
import { SetClock } from './harness.js';
import { itMatchesTheModel } from './run.js';

const up = await requireService(MARIADB);

describe.skipIf(!up)('model-based: mysql store on MariaDB', () => {
  itMatchesTheModel(
    'mysql',
    async () => {
      const pool = createPool({ host: MARIADB.host, port: MARIADB.port, user: 'root', database: 'test', connectionLimit: 4, connectTimeout: 2_000 });
      const table = `idemkit_model_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
      const clock = new SetClock();
      // Every connection the store borrows reads the model's time.
      const frozen: MysqlPool = {
        async getConnection() {
          const connection = await pool.getConnection();
          await connection.query(`SET timestamp = ${clock.now / 1000}`);
          return connection;
        },
      };
      const store = mysqlStore({ pool: frozen, table, maxResponseBytes: 64 });
      await store.migrate();
      return {
        name: 'mysql',
        unitMs: 60_000,
        exactClock: true,
        transactional: true,
        keepsNul: true,
        maxJumps: Infinity,
        async reset() {
          await pool.query(`DELETE FROM \`${table}\``);
          clock.reset();
          return store;
        },
        clock: clock.read,
        async advance(ms) {
          clock.advance(ms);
        },
        async close() {
          await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
          await pool.end();
        },
      };
    },
    { runs: 30 },
  );
});
