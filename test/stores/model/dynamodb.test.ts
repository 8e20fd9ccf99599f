/**
 * The DynamoDB store (dynalite, started here on a spare port) against the reference model, on both
 * of its claim paths: as dynalite answers a failed condition (no old item: a consistent GetItem),
 * and as DynamoDB does (the old item returned). Time jumps move its injected `clock` option, with
 * no clock margin: exact, no real time passes.
 */
import { describe } from 'vitest';
import { dynamodbStore } from '../../../src/stores/dynamodb/index.js';
import { emptyTable, returningOldItems, startDynalite, uniqueTable, withTtlApi } from '../dynamodb-support.js';
import { SetClock } from './harness.js';
import { itMatchesTheModel } from './run.js';

for (const [label, oldItems] of [
  ['dynamodb', false],
  ['dynamodb, old items returned on a failed condition', true],
] as const) {
  describe(`model-based: ${label} store`, () => {
    itMatchesTheModel(
      label,
      async () => {
        const db = await startDynalite();
        const client = db.client();
        const table = uniqueTable();
        const clock = new SetClock();
        const withTtl = withTtlApi(client);
        const store = dynamodbStore({ client: oldItems ? returningOldItems(withTtl) : withTtl, table, clock: clock.read, clockMarginMs: 0, maxResponseBytes: 64 });
        await store.migrate();
        return {
          name: label,
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
      { runs: oldItems ? 30 : 60 },
    );
  });
}
