import { StoreUnavailableError } from './errors.js';

interface Entry {
  readonly deadline: number;
  expire(): void;
}

/**
 * Bounds store operations by `limitMs` from one coarse timer shared by all of them (ticking every
 * tenth of the limit while any operation is pending): a timer per operation cost more than an
 * in-process store operation itself. An operation is refused at most `limitMs * 1.1` after it began.
 */
export class Deadlines {
  private readonly pending = new Set<Entry>();
  private timer: ReturnType<typeof setInterval> | undefined;
  private readonly limitMs: number;
  private readonly tickMs: number;

  constructor(limitMs: number) {
    this.limitMs = limitMs;
    this.tickMs = Math.max(1, Math.ceil(limitMs / 10));
  }

  /**
   * Rejects with `StoreUnavailableError` when `operation` has not settled in time. `onLate`
   * receives a value that arrives after the deadline, so it can be cleaned up.
   */
  bound<T>(operation: Promise<T>, name: string, onLate?: (value: T) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const entry: Entry = {
        deadline: Date.now() + this.limitMs,
        expire: () => reject(new StoreUnavailableError(`store ${name} did not answer within ${this.limitMs} ms (option \`storeTimeoutMs\`)`)),
      };
      this.pending.add(entry);
      if (this.timer === undefined) {
        this.timer = setInterval(() => this.tick(), this.tickMs);
        this.timer.unref?.();
      }
      operation.then(
        (value) => {
          if (this.pending.delete(entry)) resolve(value);
          else onLate?.(value);
        },
        (error: unknown) => {
          if (this.pending.delete(entry)) reject(error);
        },
      );
    });
  }

  private tick(): void {
    const now = Date.now();
    for (const entry of this.pending) {
      if (entry.deadline > now) continue;
      this.pending.delete(entry);
      entry.expire();
    }
    if (this.pending.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}
