import { StoreUnavailableError } from './errors.js';
import { SLOT, SlotList } from './slot-list.js';

/**
 * Where a store says why its operation is late (a registered symbol: two copies of idemkit agree).
 * The sqlite store's operations queue in process behind the file's one writer: when one misses its
 * deadline there, the store is busy, not unreachable, and the answer and the log line say so.
 */
export const EXPLAIN_LATE: unique symbol = Symbol.for('idemkit.explainLate') as never;

/** Called when `operation` missed its `limitMs`: the error to reject with, or undefined for the generic one. */
export type ExplainLate = (operation: string, limitMs: number) => Error | undefined;

/** The store's `[EXPLAIN_LATE]`, if it has one (wrappers such as `instrumentStore` forward it). */
export function lateExplainerOf(store: object): ExplainLate | undefined {
  const explain = (store as { readonly [EXPLAIN_LATE]?: unknown })[EXPLAIN_LATE];
  return typeof explain === 'function' ? (operation, limitMs) => (explain as ExplainLate).call(store, operation, limitMs) : undefined;
}

/**
 * Where a store lists its operations that settle before they return, by name (a registered
 * symbol). The memory store's do: each returns a promise already resolved or rejected, so no timer
 * can fire before it settles, and a deadline would only cost a promise and an entry per call.
 * `bound` checks at each call that the store's operation of that name is still the listed one: an
 * operation a wrapper replaced (`Object.create(store)` with its own `claim`, say) is bounded like
 * any other store's. A store that opens transactions is always bounded (a transaction's
 * operations share the store's names).
 */
export const SETTLED_ON_RETURN: unique symbol = Symbol.for('idemkit.settledOnReturn') as never;

type Operations = Readonly<Record<string, unknown>>;

function settledOperationsOf(store: object | undefined): Operations | undefined {
  if (store === undefined || typeof (store as { readonly beginTransaction?: unknown }).beginTransaction === 'function') return undefined;
  const listed = (store as { readonly [SETTLED_ON_RETURN]?: unknown })[SETTLED_ON_RETURN];
  return typeof listed === 'object' && listed !== null ? (listed as Operations) : undefined;
}

interface Entry {
  readonly deadline: number;
  expire(): void;
  [SLOT]: number;
}

/**
 * Bounds store operations by `limitMs` from one coarse timer shared by all of them (ticking every
 * tenth of the limit while any operation is pending): a timer per operation cost more than an
 * in-process store operation itself. An operation is refused at most `limitMs * 1.1` after it began.
 */
export class Deadlines {
  private readonly pending = new SlotList<Entry>();
  private timer: ReturnType<typeof setInterval> | undefined;
  private readonly limitMs: number;
  private readonly tickMs: number;

  private readonly explain: ExplainLate | undefined;
  /** The store whose operations are bounded, and those of them that need no bound (`SETTLED_ON_RETURN`). */
  private readonly store: Operations | undefined;
  private readonly settled: Operations | undefined;

  constructor(limitMs: number, explain?: ExplainLate, store?: object) {
    this.limitMs = limitMs;
    this.explain = explain;
    this.store = store as Operations | undefined;
    this.settled = settledOperationsOf(store);
    this.tickMs = Math.max(1, Math.ceil(limitMs / 10));
  }

  /**
   * Rejects with `StoreUnavailableError` when `operation` has not settled in time. `onLate`
   * receives a value that arrives after the deadline, so it can be cleaned up.
   */
  bound<T>(operation: Promise<T>, name: string, onLate?: (value: T) => void): Promise<T> {
    // `name` is the store operation that made `operation`, by its name.
    if (this.settles(name)) return operation;
    return new Promise<T>((resolve, reject) => {
      const entry: Entry = {
        deadline: Date.now() + this.limitMs,
        expire: () => reject(this.late(name)),
        [SLOT]: -1,
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

  /** True when the store's operation `name` settles before it returns (`SETTLED_ON_RETURN`): it needs no bound. */
  settles(name: string): boolean {
    const settled = this.settled?.[name];
    return settled !== undefined && this.store![name] === settled;
  }

  /** Why `operation` is late: the store's explanation, or the generic timeout. */
  private late(operation: string): Error {
    let explained: Error | undefined;
    try {
      explained = this.explain?.(operation, this.limitMs);
    } catch {
      // An explanation that fails explains nothing: the generic timeout stands.
    }
    return explained ?? new StoreUnavailableError(`store ${operation} did not answer within ${this.limitMs} ms (option \`storeTimeoutMs\`)`);
  }

  private tick(): void {
    const now = Date.now();
    for (const entry of this.pending.snapshot()) {
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
