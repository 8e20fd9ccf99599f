/**
 * Run settings shared by the fuzz suites (test/fuzz/*.test.ts), all from the environment:
 *
 * - `IDEMKIT_FUZZ_RUNS`: runs of each property (default 1000, a few seconds per target in CI).
 *   Properties that touch a real database run a tenth of it (`weight`), at least 20.
 *   A long run: `IDEMKIT_FUZZ_RUNS=100000 npx vitest run test/fuzz`.
 * - `IDEMKIT_FUZZ_SEED` (and `IDEMKIT_FUZZ_PATH`): replay a failure. fast-check prints both in
 *   the failure message (`{ seed: …, path: "…" }`); give them back, with `-t` naming the test:
 *   `IDEMKIT_FUZZ_SEED=-1234 IDEMKIT_FUZZ_PATH="12:0:3" npx vitest run test/fuzz/key.test.ts -t 'round-trips'`.
 *
 * No property has a time limit: a slow run is slow, never failed.
 */
import fc from 'fast-check';

const DEFAULT_RUNS = 1000;

function runsFromEnv(): number {
  const text = process.env.IDEMKIT_FUZZ_RUNS;
  if (text === undefined || text === '') return DEFAULT_RUNS;
  const runs = Number(text);
  if (!Number.isSafeInteger(runs) || runs < 1) throw new TypeError(`IDEMKIT_FUZZ_RUNS must be a positive integer, got ${JSON.stringify(text)}`);
  return runs;
}

function seedFromEnv(): { seed: number; path?: string } | undefined {
  const text = process.env.IDEMKIT_FUZZ_SEED;
  if (text === undefined || text === '') return undefined;
  const seed = Number(text);
  if (!Number.isInteger(seed)) throw new TypeError(`IDEMKIT_FUZZ_SEED must be an integer, got ${JSON.stringify(text)}`);
  const path = process.env.IDEMKIT_FUZZ_PATH;
  return path ? { seed, path } : { seed };
}

/**
 * The per-test timeout of the fuzz suites (`describe(name, FUZZ_TIMEOUT, …)`): a net against a hang,
 * never a speed requirement. Two minutes for the CI runs on a shared 2-core machine; none for a
 * long run asked for with IDEMKIT_FUZZ_RUNS.
 */
export const FUZZ_TIMEOUT = { timeout: runsFromEnv() > DEFAULT_RUNS ? 0 : 120_000 };

/** Runs of a property: `IDEMKIT_FUZZ_RUNS` × weight, at least `min`. */
export function fuzzRuns(weight = 1, min = 20): number {
  return Math.max(min, Math.round(runsFromEnv() * weight));
}

/**
 * fast-check parameters for one property: its runs, the replayed seed and path when given, and
 * the failure report fast-check writes (seed, path and the shrunk counterexample).
 */
export function fuzzParams<T>(weight = 1, min = 20): fc.Parameters<T> {
  return { numRuns: fuzzRuns(weight, min), ...seedFromEnv() };
}

/** Asserts a synchronous property with the suite's settings. */
export function fuzz<Ts extends [unknown, ...unknown[]]>(property: fc.IProperty<Ts>, weight = 1, min = 20): void {
  fc.assert(property, fuzzParams<Ts>(weight, min));
}

/** Asserts an asynchronous property with the suite's settings (`weight` scales the runs). */
export function fuzzAsync<Ts extends [unknown, ...unknown[]]>(property: fc.IAsyncProperty<Ts>, weight = 1, min = 20): Promise<void> {
  return fc.assert(property, fuzzParams<Ts>(weight, min));
}

/** One code point of any plane, or (one time in five) a lone surrogate, which fast-check's 'binary' leaves out. */
const anyUnit = fc.oneof(
  { weight: 4, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
  { weight: 1, arbitrary: fc.integer({ min: 0xd800, max: 0xdfff }).map((code) => String.fromCharCode(code)) },
);

/** Strings of any UTF-16 code units, lone surrogates included. */
export const anyUtf16 = (constraints: Omit<fc.StringConstraints, 'unit'> = {}) => fc.string({ unit: anyUnit, ...constraints });

/** What a call threw, or undefined. */
export function thrown(fn: () => unknown): unknown {
  try {
    fn();
    return undefined;
  } catch (error) {
    return error;
  }
}
