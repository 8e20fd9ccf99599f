/**
 * What the model-based test needs of a store: a clean store per run, and a way to move the
 * store's own clock (the one its decisions use) by a whole number of units.
 */
import type { IdempotencyStore } from '../../../src/core/store.js';
import type { StoreModel } from './model.js';

export interface ModelHarness {
  readonly name: string;
  /**
   * One unit of virtual time, in ms: every lease, window and jump is a whole number of units. On
   * a real clock it must be longer than the commands between a deadline's start and its end take.
   */
  readonly unitMs: number;
  /**
   * True when the harness sets the store's clock (an injected clock, a frozen session timestamp):
   * the times the store reports are then exactly the model's. Otherwise they lie within the
   * bounds measured around the call that set them.
   */
  readonly exactClock: boolean;
  /** The store has `beginTransaction`: fenced writes inside transactions are generated too. */
  readonly transactional: boolean;
  /** The store keeps a scope holding NUL (PostgreSQL refuses one: its text cannot hold it). */
  readonly keepsNul: boolean;
  /** Jumps per run, to bound the real sleeps of a store that can only be moved by waiting. */
  readonly maxJumps: number;
  /** Before each run: an empty store (no record of an earlier run), its clock at virtual time 0. */
  reset(): Promise<IdempotencyStore>;
  /** The store's clock now, as far as the harness knows it (epoch ms): exact when set, else read. */
  clock(): number;
  /**
   * Moves the store's clock by `ms` (the model's `now` has already moved): afterwards every
   * deadline the model holds at or before `now` has passed on the store's clock.
   */
  advance(ms: number, model: StoreModel): Promise<void>;
  close(): Promise<void>;
}

/** A clock the harness sets: virtual time from a fixed epoch, exact. */
export class SetClock {
  now: number;
  constructor(readonly epoch = Date.UTC(2026, 0, 1)) {
    this.now = epoch;
  }
  reset(): void {
    this.now = this.epoch;
  }
  read = (): number => this.now;
  advance(ms: number): void {
    this.now += ms;
  }
}

/**
 * Sleeps until every deadline at or before the model's `now` has passed on the real clock, with
 * a few ms to spare: Redis derives a fresh record's times from PTTL, to the ms. A jump thus waits
 * only as long as the deadlines it passes need, never a fixed time.
 */
export async function waitPast(model: StoreModel): Promise<void> {
  const passed = model.deadlines().filter((d) => d.v <= model.now);
  const until = Math.max(0, ...passed.map((d) => d.hi + 3));
  while (Date.now() < until) await new Promise((resolve) => setTimeout(resolve, until - Date.now()));
}
