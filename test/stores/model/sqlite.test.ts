/**
 * The SQLite store (better-sqlite3, a temp file) against the reference model. Time jumps move
 * its injected `clock` option: exact, no real time passes.
 */
import { describe } from 'vitest';
import { sqliteStore } from '../../../src/stores/sqlite/index.js';
import { sqliteFile } from '../../support/sqlite-file.js';
import { SetClock } from './harness.js';
import { itMatchesTheModel } from './run.js';

const TABLE = 'model_records';

describe('model-based: sqlite store', () => {
  itMatchesTheModel(
    'sqlite',
    async () => {
      const file = sqliteFile();
      const clock = new SetClock();
      const store = sqliteStore({ database: file.db, table: TABLE, clock: clock.read, maxResponseBytes: 64 });
      return {
        name: 'sqlite',
        unitMs: 60_000,
        exactClock: true,
        transactional: true,
        keepsNul: true,
        maxJumps: Infinity,
        async reset() {
          file.db.exec(`DELETE FROM ${TABLE}`);
          clock.reset();
          return store;
        },
        clock: clock.read,
        async advance(ms) {
          clock.advance(ms);
        },
        async close() {
          file.cleanup();
        },
      };
    },
    { runs: 100 },
  );
});
