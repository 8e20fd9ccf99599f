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
