import { InvalidOptionError } from './errors.js';

/** Validates an optional integer option (>= min), naming it in the error. */
export function integerOption(name: string, value: unknown, fallback: number, min: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new InvalidOptionError(name, `expected an integer >= ${min}, got ${String(value)}`);
  }
  return value;
}

/** Validates an optional boolean option, naming it in the error. */
export function booleanOption(name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new InvalidOptionError(name, `expected a boolean, got ${typeof value}`);
  return value;
}

/** The longest delay `setTimeout` honours; a larger one fires after 1 ms. */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * Validates a duration in ms: an integer in [min, MAX_TIMER_MS], or `Infinity` (no limit) when
 * allowed. Larger finite values are refused because a timer would fire at once.
 */
export function durationOption(name: string, value: unknown, fallback: number, min: number, allowInfinity: boolean): number {
  if (value === Infinity && allowInfinity) return Infinity;
  const ms = integerOption(name, value, fallback, min);
  if (ms > MAX_TIMER_MS) {
    throw new InvalidOptionError(name, `expected at most ${MAX_TIMER_MS} ms${allowInfinity ? ' (use Infinity for no limit)' : ''}, got ${ms}`);
  }
  return ms;
}

/**
 * Refuses option names nobody reads: a typo (`retry: 5`) or another library's name
 * (`onFailedAttempt`) would otherwise silently leave the default in place.
 */
export function rejectUnknown(options: object, known: readonly string[], prefix: string, hints: Readonly<Record<string, string>> = {}): void {
  for (const name of Object.keys(options)) {
    if (known.includes(name)) continue;
    const hint = hints[name] ? `; use \`${hints[name]}\`` : '';
    throw new InvalidOptionError(prefix + name, `unknown option${hint}`);
  }
}
