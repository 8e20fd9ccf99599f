import type { IdempotencyLogger } from './logger.js';
import type { Slotted } from './slot-list.js';
import { SlotList } from './slot-list.js';

/** Something whose lease the keeper renews (its place among the keeper's is its `[SLOT]`). */
export interface Renewable extends Slotted {
  renew(): void;
}

/** The quiet period of the starvation warning, like the logger's other repeated lines (`FailureReporter`). */
const WARN_INTERVAL_MS = 60_000;

/**
 * Renews the leases of all running executions of one engine from a single timer, every
 * `periodMs` (a third of the lease): a timer per request cost more than the claim itself.
 * The timer is unref'd and stops while nothing runs.
 *
 * It also tells when renewals are starved: a renewal that took longer than a period, or is still
 * waiting at the next tick, is queued behind the store's connections (typically the handlers' own
 * transactions in the same pool), and a lease that runs out meanwhile lets another instance take
 * the key over while its handler still runs. An execution sends no new renewal while one waits,
 * so a starved pool's queue does not grow by one renewal per tick (Execution.renew).
 */
export class LeaseKeeper {
  private readonly running = new SlotList<Renewable>();
  private timer: ReturnType<typeof setInterval> | undefined;
  readonly periodMs: number;
  private readonly logger: IdempotencyLogger | undefined;
  /** When the starvation warning was last logged, and how many were left out since. */
  private warnedAt: number | undefined;
  private skipped = 0;

  constructor(periodMs: number, logger?: IdempotencyLogger) {
    this.periodMs = periodMs;
    this.logger = logger;
  }

  add(execution: Renewable): void {
    this.running.add(execution);
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.tick(), this.periodMs);
      this.timer.unref?.();
    }
  }

  delete(execution: Renewable): void {
    this.running.delete(execution);
  }

  /**
   * A renewal of `lease` (its name, built only when logged) waited `waitedMs` for the store:
   * `pending` when it still waits at a tick, else it answered after more than a period. Logged
   * as a warning at most once per minute, the next line counting those left out meanwhile.
   */
  renewalLate(lease: () => string, waitedMs: number, pending: boolean): void {
    if (this.logger === undefined) return;
    const now = Date.now();
    if (this.warnedAt !== undefined && now - this.warnedAt < WARN_INTERVAL_MS) {
      this.skipped++;
      return;
    }
    const more = this.skipped > 0 ? ` (${this.skipped} more like it since the last report)` : '';
    this.warnedAt = now;
    this.skipped = 0;
    const waited = pending ? `has waited ${waitedMs} ms for the store and is still waiting` : `took ${waitedMs} ms`;
    try {
      this.logger.warn(
        `idemkit: lease renewal starved: the renewal of the lease on ${lease()} ${waited}, longer than the renewal period ` +
          `(${this.periodMs} ms, a third of leaseMs). Renewals are queued behind the store's connections, typically the ` +
          `handlers' own transactions in the same pool; a lease that runs out lets another instance take the key over ` +
          `while its handler still runs. Give the store a pool of its own for renewals (option \`leasePool\` of ` +
          `postgresStore/mysqlStore), or size the pool above the number of concurrent requests${more}`,
      );
    } catch {
      // A logger that throws must not stop the renewals.
    }
  }

  private tick(): void {
    if (this.running.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    for (const execution of this.running.snapshot()) execution.renew();
  }
}
