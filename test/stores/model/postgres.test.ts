/**
 * The PostgreSQL store against the reference model, on the shared server (127.0.0.1:5432,
 * database `test`, a table of its own).
 *
 * Time jumps: the store decides on the server's clock_timestamp() (and now() in reap). Its claim
 * function pins `search_path = pg_catalog, pg_temp`, so no shadowing clock function can be put in
 * front of it, and the server's clock cannot be set. What a decision compares is a stored
 * deadline against that clock, so the harness moves every stored deadline (lease_until,
 * expires_at) of its table back by the jump instead: to the store, the same as its clock moving
 * forward (and the model's bounds of each stored deadline move back with it). Real time still
 * runs, so a unit is an hour: far longer than any run.
 */
import { describe } from 'vitest';
import { postgresStore } from '../../../src/stores/postgres/index.js';
import { POSTGRES, requireService } from '../../support/services.js';
import { dropTable, newPool, uniqueTable } from '../postgres-support.js';
import { waitPast } from './harness.js';
import { itMatchesTheModel } from './run.js';

const up = await requireService(POSTGRES);
const HOUR = 3_600_000;

describe.skipIf(!up)('model-based: postgres store', () => {
  itMatchesTheModel(
    'postgres',
    async () => {
      const pool = newPool({ max: 4 });
      const table = uniqueTable();
      const store = postgresStore({ pool, table, maxResponseBytes: 64 });
      await store.migrate();
      return {
        name: 'postgres',
        unitMs: HOUR,
        exactClock: false,
        transactional: true,
        keepsNul: false,
        maxJumps: Infinity,
        async reset() {
          await pool.query(`DELETE FROM "${table}"`);
          return store;
        },
        clock: () => Date.now(),
        async advance(ms, model) {
          const shift = `$1 * interval '1 millisecond'`;
          await pool.query(`UPDATE "${table}" SET lease_until = lease_until - ${shift}, expires_at = expires_at - ${shift}`, [ms]);
          for (const d of model.deadlines()) {
            d.lo -= ms;
            d.hi -= ms;
          }
          // Only a deadline on the jump's instant, set a moment ago, can still be ahead: wait it out.
          await waitPast(model);
        },
        async close() {
          await dropTable(pool, table);
          await pool.end();
        },
      };
    },
    { runs: 30 },
  );
});
