/**
 * The memory store against the reference model. Time jumps move its injected `clock` option:
 * exact, no real time passes.
 */
import { describe } from 'vitest';
import type { MemoryStore } from '../../../src/stores/memory.js';
import { memoryStore } from '../../../src/stores/memory.js';
import { itMatchesTheModel } from './run.js';

const EPOCH = Date.UTC(2026, 0, 1);

describe('model-based: memory store', () => {
  itMatchesTheModel(
    'memory',
    async () => {
      let now = EPOCH;
      let store: MemoryStore | undefined;
      return {
        name: 'memory',
        unitMs: 60_000,
        exactClock: true,
        maxJumps: Infinity,
        async reset() {
          store?.close();
          now = EPOCH;
          store = memoryStore({ clock: () => now, maxResponseBytes: 64, sweepIntervalMs: 0 });
          return store;
        },
        async advance(ms) {
          now += ms;
        },
        storeTime: (virtualMs) => EPOCH + virtualMs,
        inStep: () => true,
        async close() {
          store?.close();
        },
      };
    },
    { runs: 200 },
  );
});
