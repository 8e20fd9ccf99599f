import { describe, expect, it } from 'vitest';
import { InvalidOptionError, StoreUnavailableError } from '../../src/core/errors.js';
import { FailureReporter } from '../../src/core/logger.js';
import { resolveOptions } from '../../src/core/options.js';
import { memoryStore } from '../../src/stores/memory/index.js';

function recording() {
  const lines: Array<{ level: 'warn' | 'error'; message: string; args: unknown[] }> = [];
  return {
    lines,
    logger: {
      warn: (message: string, ...args: unknown[]) => lines.push({ level: 'warn', message, args }),
      error: (message: string, ...args: unknown[]) => lines.push({ level: 'error', message, args }),
    },
  };
}

describe('FailureReporter', () => {
  it('logs each distinct failure (code + message) at most once per interval, then with the count left out', () => {
    let now = 0;
    const { lines, logger } = recording();
    const reporter = new FailureReporter(logger, { now: () => now });
    const down = new StoreUnavailableError('claim failed');
    reporter.report(down);
    for (let i = 0; i < 50; i++) reporter.report(new StoreUnavailableError('claim failed'));
    reporter.report(new StoreUnavailableError('complete failed'));
    reporter.report(new Error('claim failed'));
    expect(lines.map((l) => l.message)).toEqual([
      'idemkit: ERR_IDEMKIT_STORE_UNAVAILABLE: claim failed',
      'idemkit: ERR_IDEMKIT_STORE_UNAVAILABLE: complete failed',
      'idemkit: Error: claim failed',
    ]);
    expect(lines[0]!.args).toEqual([down]);
    now = 59_999;
    reporter.report(down);
    expect(lines).toHaveLength(3);
    now = 60_000;
    reporter.report(down);
    expect(lines.at(-1)!.message).toBe('idemkit: ERR_IDEMKIT_STORE_UNAVAILABLE: claim failed (51 more like it since the last report)');
  });

  it('survives a logger that throws and odd thrown values', () => {
    const called: Array<{ message: string; args: unknown[] }> = [];
    const reporter = new FailureReporter({
      warn: () => {},
      error: (message: string, ...args: unknown[]) => {
        called.push({ message, args });
        throw new Error('broken logger');
      },
    });
    const bare = Object.create(null) as object;
    expect(() => reporter.report('a string')).not.toThrow();
    expect(() => reporter.report(undefined)).not.toThrow();
    // String() of an object without a prototype throws: the reporter falls back to its tag.
    expect(() => reporter.report(bare)).not.toThrow();
    // Each was named by its type and text and handed to the logger, which threw every time; the
    // reporter still rate-limits after a throw (the repeat is left out) and still reports new ones.
    expect(() => reporter.report('a string')).not.toThrow();
    expect(() => reporter.report(new StoreUnavailableError('down'))).not.toThrow();
    expect(called.map((c) => c.message)).toEqual([
      'idemkit: string: a string',
      'idemkit: undefined: undefined',
      'idemkit: object: [object Object]',
      'idemkit: ERR_IDEMKIT_STORE_UNAVAILABLE: down',
    ]);
    expect(called.map((c) => c.args)).toEqual([['a string'], [undefined], [bare], [expect.any(StoreUnavailableError)]]);
  });
});

describe('the logger option', () => {
  const store = memoryStore({ sweepIntervalMs: 0 });

  it('what reaches onError also reaches the logger; onError is still called every time', () => {
    const { lines, logger } = recording();
    const hooked: unknown[] = [];
    const o = resolveOptions({ store, logger, onError: (e) => hooked.push(e) });
    o.onError(new StoreUnavailableError('down'));
    o.onError(new StoreUnavailableError('down'));
    expect(hooked).toHaveLength(2);
    expect(lines).toHaveLength(1);
  });

  it('a throwing onError still logs and still throws (the middleware reports it as before)', () => {
    const { lines, logger } = recording();
    const o = resolveOptions({ store, logger, onError: () => { throw new Error('hook'); } });
    expect(() => o.onError(new StoreUnavailableError('down'))).toThrow('hook');
    expect(lines).toHaveLength(1);
  });

  it('refuses what is not a logger, naming the option', () => {
    for (const logger of [null, 'console', { error: () => {} }]) {
      const thrown = (() => {
        try {
          resolveOptions({ store, logger: logger as never });
        } catch (error) {
          return error;
        }
      })();
      expect(thrown).toBeInstanceOf(InvalidOptionError);
      expect((thrown as InvalidOptionError).option).toBe('logger');
    }
  });
});
