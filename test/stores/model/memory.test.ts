/**
 * The memory store against the reference model. Time jumps move its injected `clock` option:
 * exact, no real time passes.
 */
import { describe } from 'vitest';
import type { MemoryStore } from '../../../src/stores/memory/index.js';
import { memoryStore } from '../../../src/stores/memory/index.js';
import { SetClock } from './harness.js';
import { itMatchesTheModel } from './run.js';

describe('model-based: memory store', () => {
  itMatchesTheModel(
    'memory',
    async () => {
      const clock = new SetClock();
      let store: MemoryStore | undefined;
      return {
        name: 'memory',
        unitMs: 60_000,
        exactClock: true,
        transactional: false,
        keepsNul: true,
        maxJumps: Infinity,
        async reset() {
          store?.close();
          clock.reset();
          store = memoryStore({ clock: clock.read, maxResponseBytes: 64, sweepIntervalMs: 0 });
          return store;
        },
        clock: clock.read,
        async advance(ms) {
          clock.advance(ms);
        },
        async close() {
          store?.close();
        },
      };
    },
    { runs: 200 },
  );
});
