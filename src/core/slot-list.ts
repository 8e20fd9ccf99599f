/** Where an object keeps its place in a `SlotList` (-1 while outside any). */
export const SLOT: unique symbol = Symbol('idemkit.slot');

/** What a `SlotList` holds: an object that keeps its own place in it. */
export interface Slotted {
  [SLOT]: number;
}

/**
 * A set of objects held in an array, each knowing its index, for the sets that gain and lose an
 * entry on every request (the store deadlines, the lease keeper's executions, the memory store's
 * records in flight): adding and removing costs no hashing, and no table is reallocated each time
 * the count crosses a power of two, as a `Set` of a few entries does (docs/performance.md). An
 * object belongs to at most one list at a time. The order is not kept.
 */
export class SlotList<T extends Slotted> {
  private readonly items: T[] = [];

  get size(): number {
    return this.items.length;
  }

  add(item: T): void {
    if (item[SLOT] !== -1) return;
    item[SLOT] = this.items.length;
    this.items.push(item);
  }

  /** Removes `item`; false when it was not here. */
  delete(item: T): boolean {
    const slot = item[SLOT];
    if (slot === -1 || this.items[slot] !== item) return false;
    const last = this.items.pop()!;
    if (last !== item) {
      this.items[slot] = last;
      last[SLOT] = slot;
    }
    item[SLOT] = -1;
    return true;
  }

  /** The items now, as a copy: the caller may add and remove while it walks them. */
  snapshot(): T[] {
    return this.items.slice();
  }
}
