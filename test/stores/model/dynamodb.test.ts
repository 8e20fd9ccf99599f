/**
 * The DynamoDB store (dynalite, started here on a spare port) against the reference model. Time
 * jumps move its injected `clock` option, with no clock margin: exact, no real time passes.
 */
import { describe } from 'vitest';
import { dynamodbStore } from '../../../src/stores/dynamodb/index.js';
import { emptyTable, startDynalite, uniqueTable, withTtlApi } from '../dynamodb-support.js';
import { SetClock } from './harness.js';
import { itMatchesTheModel } from './run.js';

describe('model-based: dynamodb store', () => {
  itMatchesTheModel(
    'dynamodb',
    async () => {
      const db = await startDynalite();
      const client = db.client();
      const table = uniqueTable();
      const clock = new SetClock();
      const store = dynamodbStore({ client: withTtlApi(client), table, clock: clock.read, clockMarginMs: 0, maxResponseBytes: 64 });
      await store.migrate();
      return {
        name: 'dynamodb',
        unitMs: 60_000,
        exactClock: true,
        transactional: false,
        keepsNul: true,
        maxJumps: Infinity,
        async reset() {
          await emptyTable(client, table);
          clock.reset();
          return store;
        },
        clock: clock.read,
        async advance(ms) {
          clock.advance(ms);
        },
        close: () => db.close(),
      };
    },
    { runs: 60 },
  );
});
