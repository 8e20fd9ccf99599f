/**
 * The suites provoke failures on purpose (a handler that throws, a store that is down), and
 * idemkit's default logger reports each on the console: hundreds of expected stack traces that
 * would bury a real one. This setup file (vitest.config.ts `setupFiles`) holds back the console
 * lines idemkit writes (they start with `idemkit: `) while a test runs, and prints them only when
 * that test fails, so a failure keeps its context and a passing run stays quiet. Anything else on
 * the console passes through. `IDEMKIT_TEST_LOGS=1` prints every line as it comes.
 */
import { beforeEach } from 'vitest';

const held: Array<{ level: 'warn' | 'error'; args: unknown[] }> = [];

/** The lines held back so far in the running test (for the test of this file). */
export function heldLogLines(): string[] {
  return held.map(({ args }) => String(args[0]));
}

if (process.env.IDEMKIT_TEST_LOGS !== '1') {
  for (const level of ['warn', 'error'] as const) {
    const original = console[level].bind(console);
    console[level] = (...args: unknown[]) => {
      if (typeof args[0] === 'string' && args[0].startsWith('idemkit: ')) held.push({ level, args });
      else original(...args);
    };
    Object.defineProperty(console[level], 'original', { value: original });
  }

  beforeEach((context) => {
    held.length = 0;
    context.onTestFailed(() => {
      for (const { level, args } of held.splice(0)) (console[level] as unknown as { original: (...a: unknown[]) => void }).original(...args);
    });
  });
}
