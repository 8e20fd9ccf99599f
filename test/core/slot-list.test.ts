import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SLOT, SlotList } from '../../src/core/slot-list.js';

interface Item {
  readonly id: number;
  [SLOT]: number;
}

describe('SlotList', () => {
  it('holds what was added and not removed, as a Set would (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 9 })), { maxLength: 60 }), (steps) => {
        const items: Item[] = Array.from({ length: 10 }, (_, id) => ({ id, [SLOT]: -1 }));
        const list = new SlotList<Item>();
        const reference = new Set<Item>();
        for (const [adding, index] of steps) {
          const item = items[index]!;
          if (adding) {
            list.add(item);
            reference.add(item);
          } else {
            expect(list.delete(item)).toBe(reference.delete(item));
          }
          expect(list.size).toBe(reference.size);
        }
        expect(new Set(list.snapshot())).toEqual(reference);
        // Every item knows its place, and one outside the list knows it is outside.
        list.snapshot().forEach((item, slot) => expect(item[SLOT]).toBe(slot));
        for (const item of items) if (!reference.has(item)) expect(item[SLOT]).toBe(-1);
      }),
    );
  });

  it('a snapshot may be walked while items are removed and added', () => {
    const list = new SlotList<Item>();
    const items: Item[] = Array.from({ length: 5 }, (_, id) => ({ id, [SLOT]: -1 }));
    for (const item of items) list.add(item);
    const seen: number[] = [];
    for (const item of list.snapshot()) {
      seen.push(item.id);
      list.delete(item);
    }
    expect(seen.sort()).toEqual([0, 1, 2, 3, 4]);
    expect(list.size).toBe(0);
  });
});
