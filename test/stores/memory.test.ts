import { describe, expect, it } from 'vitest';
import { InvalidOptionError, StoreUnavailableError } from '../../src/core/errors.js';
import { memoryStore } from '../../src/stores/memory.js';
import { describeStoreContract } from './contract.js';
import { manualClock } from './manual-clock.js';

describeStoreContract('memory', () => {
  const clock = manualClock();
  const store = memoryStore({ clock: clock.now, maxResponseBytes: 64 * 1024 });
  return { store, advance: clock.advance, close: () => store.close() };
});

describe('memoryStore', () => {
  const opts = { leaseMs: 1000, windowMs: 5000 };

  it('is bounded: when full of live records it refuses new claims instead of forgetting keys', async () => {
    const clock = manualClock();
    const store = memoryStore({ maxRecords: 3, clock: clock.now, sweepIntervalMs: 0 });
    for (const key of ['a', 'b', 'c']) expect((await store.claim({ scope: '', key }, 'fp', opts)).kind).toBe('acquired');
    await expect(store.claim({ scope: '', key: 'd' }, 'fp', opts)).rejects.toBeInstanceOf(StoreUnavailableError);
    clock.advance(6000);
    expect((await store.claim({ scope: '', key: 'd' }, 'fp', opts)).kind).toBe('acquired');
    expect(store.size).toBe(1);
  });

  it('validates its options eagerly, naming the option', () => {
    expect(() => memoryStore({ maxRecords: 0 })).toThrow(InvalidOptionError);
    expect(() => memoryStore({ maxRecords: 0 })).toThrow(/maxRecords/);
    expect(() => memoryStore({ sweepIntervalMs: -1 })).toThrow(/sweepIntervalMs/);
  });
});
