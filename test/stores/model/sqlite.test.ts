/**
 * The SQLite store (better-sqlite3, a temp file) against the reference model. Time jumps move
 * its injected `clock` option: exact, no real time passes.
 */
import { describe } from 'vitest';
import { sqliteStore } from '../../../src/stores/sqlite.js';
import { sqliteFile } from '../../support/sqlite-file.js';
import { itMatchesTheModel } from './run.js';

const EPOCH = Date.UTC(2026, 0, 1);
const TABLE = 'model_records';

describe('model-based: sqlite store', () => {
  itMatchesTheModel(
    'sqlite',
    async () => {
      const file = sqliteFile();
      let now = EPOCH;
      const store = sqliteStore({ database: file.db, table: TABLE, clock: () => now, maxResponseBytes: 64 });
      return {
        name: 'sqlite',
        unitMs: 60_000,
        exactClock: true,
        maxJumps: Infinity,
        async reset() {
          file.db.exec(`DELETE FROM ${TABLE}`);
          now = EPOCH;
          return store;
        },
        async advance(ms) {
          now += ms;
        },
        storeTime: (virtualMs) => EPOCH + virtualMs,
        inStep: () => true,
        async close() {
          file.cleanup();
        },
      };
    },
    { runs: 100 },
  );
});
