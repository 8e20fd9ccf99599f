import { InvalidOptionError } from '../core/errors.js';
import { optionReader } from '../core/option-reader.js';

/**
 * A retry budget: a token bucket shared by every call of one client (or of several, if they are
 * given the same instance). Every call deposits `ratio` of a token before its first attempt and
 * every retry withdraws a whole token, so over any stretch of time
 *
 *     retries <= ratio × calls + capacity
 *
 * During an outage every call fails, the bucket drains, and the client falls back to about one
 * attempt per call plus `ratio` retries: a failing dependency sees at most `ratio` extra traffic
 * instead of (1 + retries)× its normal load (the "retry storm").
 */
export interface RetryBudget {
  /** Credits one call (its first attempt). */
  deposit(): void;
  /** Takes one token for a retry; false (and nothing taken) when fewer than one token is left. */
  tryWithdraw(): boolean;
  /** The tokens available now, for metrics. */
  readonly tokens: number;
}

export interface RetryBudgetOptions {
  /**
   * Tokens each call deposits, i.e. the fraction of extra traffic retries may add over time.
   * Between 0 and 1.
   * @default 0.1
   */
  readonly ratio?: number;
  /**
   * The most tokens the bucket holds: how many retries a burst may spend after a quiet period.
   * @default 10
   */
  readonly capacity?: number;
  /**
   * Tokens at creation, so the first calls of a fresh process can retry.
   * @default capacity
   */
  readonly initialTokens?: number;
}

// Tokens are counted in millionths so that ten deposits of 0.1 make exactly one token.
const UNIT = 1_000_000;

/** Creates a retry budget to share between clients that call the same dependency. */
export function createRetryBudget(options: RetryBudgetOptions = {}): RetryBudget {
  return new TokenBucket(resolveBudgetOptions(options));
}

/** Validates budget options; `path` names them as nested options (`retryBudget.ratio`). */
export function resolveBudgetOptions(options: RetryBudgetOptions, path?: string): Required<RetryBudgetOptions> {
  const read = optionReader(path === undefined ? 'createRetryBudget()' : `\`${path}\``, options, path === undefined ? {} : { path });
  // Catches a percentage written as 10 instead of 0.1.
  const ratio = read.number('ratio', { default: 0.1, min: 0, max: 1 });
  const capacity = read.integer('capacity', { default: 10, min: 1 });
  const initialTokens = read.integer('initialTokens', { default: capacity });
  if (initialTokens > capacity) read.fail('initialTokens', `must be at most capacity (${capacity})`);
  read.done();
  return { ratio, capacity, initialTokens };
}

class TokenBucket implements RetryBudget {
  readonly #deposit: number;
  readonly #capacity: number;
  #balance: number;

  constructor(options: Required<RetryBudgetOptions>) {
    this.#deposit = Math.round(options.ratio * UNIT);
    this.#capacity = options.capacity * UNIT;
    this.#balance = options.initialTokens * UNIT;
  }

  deposit(): void {
    this.#balance = Math.min(this.#capacity, this.#balance + this.#deposit);
  }

  tryWithdraw(): boolean {
    if (this.#balance < UNIT) return false;
    this.#balance -= UNIT;
    return true;
  }

  get tokens(): number {
    return this.#balance / UNIT;
  }
}

/** Accepts a budget instance, budget options, or `false`; a missing value gets a fresh default budget. */
export function budgetOption(value: unknown): RetryBudget | undefined {
  if (value === false) return undefined;
  if (value === undefined) return createRetryBudget();
  if (isBudget(value)) return value;
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    return new TokenBucket(resolveBudgetOptions(value as RetryBudgetOptions, 'retryBudget'));
  }
  throw new InvalidOptionError('retryBudget', 'expected a RetryBudget (createRetryBudget()), budget options, or false');
}

function isBudget(value: unknown): value is RetryBudget {
  const candidate = value as Partial<RetryBudget> | null;
  return typeof candidate?.deposit === 'function' && typeof candidate.tryWithdraw === 'function';
}
