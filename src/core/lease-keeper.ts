/** Something whose lease the keeper renews. */
export interface Renewable {
  renew(): void;
}

/**
 * Renews the leases of all running executions of one engine from a single timer, every
 * `periodMs` (a third of the lease): a timer per request cost more than the claim itself.
 * The timer is unref'd and stops while nothing runs.
 */
export class LeaseKeeper {
  private readonly running = new Set<Renewable>();
  private timer: ReturnType<typeof setInterval> | undefined;
  private readonly periodMs: number;

  constructor(periodMs: number) {
    this.periodMs = periodMs;
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

  private tick(): void {
    if (this.running.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    for (const execution of this.running) execution.renew();
  }
}
