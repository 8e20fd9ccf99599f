/**
 * The logger the middleware reports failures to: the `{ warn, error }` shape that console, pino,
 * winston and most loggers share. idemkit calls it with a message first, then the error.
 */
export interface IdempotencyLogger {
  warn(message: string, ...args: unknown[]): void;
  error(message: string, ...args: unknown[]): void;
}

export interface FailureReporterOptions {
  /** The quiet period per distinct failure, in ms. @default 60_000 */
  readonly intervalMs?: number;
  /** The clock (ms); injectable for tests. @default Date.now */
  readonly now?: () => number;
}

/** How many distinct failures are remembered; past it the oldest is forgotten (and may print again). */
const MAX_REMEMBERED = 1_000;

/**
 * Sends each distinct failure (its code and message) to `logger` at most once per `intervalMs`, so
 * a misconfigured store that fails every request logs once a minute, not once per request. The
 * next line for a failure says how many like it were left out meanwhile.
 */
export class FailureReporter {
  readonly #logger: IdempotencyLogger;
  readonly #intervalMs: number;
  readonly #now: () => number;
  /** Failure key → when it was last logged and how many were left out since. */
  readonly #seen = new Map<string, { at: number; skipped: number }>();

  constructor(logger: IdempotencyLogger, options: FailureReporterOptions = {}) {
    this.#logger = logger;
    this.#intervalMs = options.intervalMs ?? 60_000;
    this.#now = options.now ?? Date.now;
  }

  report(error: unknown, level: 'warn' | 'error' = 'error'): void {
    const code = errorCode(error);
    const message = errorMessage(error);
    const key = `${code}\u0000${message}`;
    const now = this.#now();
    const seen = this.#seen.get(key);
    if (seen !== undefined && now - seen.at < this.#intervalMs) {
      seen.skipped++;
      return;
    }
    this.#seen.delete(key);
    if (this.#seen.size >= MAX_REMEMBERED) this.#seen.delete(this.#seen.keys().next().value!);
    this.#seen.set(key, { at: now, skipped: 0 });
    const more = seen !== undefined && seen.skipped > 0 ? ` (${seen.skipped} more like it since the last report)` : '';
    // A logger that throws must not turn a reported failure into a failed request.
    try {
      this.#logger[level](`idemkit: ${code}: ${message}${more}`, error);
    } catch {
      /* nothing left to tell */
    }
  }
}

/** The default logger: the console. */
export const consoleLogger: IdempotencyLogger = {
  warn: (message, ...args) => console.warn(message, ...args),
  error: (message, ...args) => console.error(message, ...args),
};

function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  if (typeof code === 'string' || typeof code === 'number') return String(code);
  return error instanceof Error ? error.name : typeof error;
}

function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  try {
    return String(error);
  } catch {
    return Object.prototype.toString.call(error);
  }
}
