/**
 * What the model-based test needs of a store: a clean store per run, and a way to move the
 * store's own clock (the one its decisions use) by a whole number of units.
 */
import type { IdempotencyStore } from '../../../src/core/store.js';

export interface ModelHarness {
  readonly name: string;
  /**
   * One unit of virtual time, in ms: every lease, window and jump is a whole number of units. On
   * a real clock it must be far longer than a run's commands take (see `inStep`).
   */
  readonly unitMs: number;
  /**
   * True when the store's clock is set by the harness (an injected clock, a frozen session
   * timestamp): times the store reports equal the model's exactly. Otherwise they may run up to
   * a unit ahead (real time passing while commands run; see `inStep`).
   */
  readonly exactClock: boolean;
  /** Jumps per run, to bound the real sleeps of a store that can only be moved by waiting. */
  readonly maxJumps: number;
  /** Before each run: an empty store (no record of an earlier run) whose clock reads virtual time 0. */
  reset(): Promise<IdempotencyStore>;
  /** Moves the store's clock forward by `ms` (a whole number of units). */
  advance(ms: number): Promise<void>;
  /** What the store should report (epoch ms on its clock) for the virtual time `virtualMs`, now. */
  storeTime(virtualMs: number): number;
  /**
   * False when real time has run ahead of virtual time by a unit or more. Every deadline the
   * model says is ahead is at least a unit ahead, and real time only ever runs ahead (sleeps
   * last at least as long as the jump they stand for), so while this holds the store decides
   * as the model does; past it a deadline may have passed early on the store's clock, and the
   * run is discarded as inconclusive (fc.pre), never counted as passed or failed. Always true on
   * a set clock.
   */
  inStep(): boolean;
  close(): Promise<void>;
}

/**
 * Real time with a virtual offset, for stores that decide on the server's own running clock.
 * Virtual time moves by sleeping (`sleep`) or by moving every stored deadline back (`shifted`,
 * which the store then reports that much earlier).
 */
export class RealTimeline {
  private start = Date.now();
  private slept = 0;
  shifted = 0;

  constructor(private readonly unitMs: number) {}

  restart(): void {
    this.start = Date.now();
    this.slept = 0;
    this.shifted = 0;
  }

  /** How far real time has run ahead of the virtual time moved by sleeping. */
  drift(): number {
    return Date.now() - this.start - this.slept;
  }

  inStep(): boolean {
    return this.drift() < this.unitMs;
  }

  /** Epoch ms of a virtual time on the store's clock, as the store reports it now. */
  storeTime(virtualMs: number): number {
    return this.start + virtualMs - this.shifted;
  }

  /**
   * Waits `ms` of real time, and a few ms more (counted as drift): a deadline on the jump's
   * instant has then passed on every clock reading, whatever rounding the store does (Redis
   * derives a fresh record's start from PTTL, to the ms).
   */
  async sleep(ms: number): Promise<void> {
    const until = Date.now() + ms + 3;
    while (Date.now() < until) await new Promise((resolve) => setTimeout(resolve, until - Date.now()));
    this.slept += ms;
  }
}
