/** The one option reader every factory validates its options with. */
import * as kit from 'idemkit/kit';
import * as root from 'idemkit';
import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import { checkDuration, checkInteger, closestName, HTTP_TOKEN, isHttpToken, MAX_TIMER_MS, optionReader } from '../../src/core/option-reader.js';
import type { OptionReader } from '../../src/core/option-reader.js';

type Options = Record<string, unknown>;
const reader = (options: Options) => optionReader<Options>('thing()', options);

function refusal(fn: () => unknown): InvalidOptionError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect(error).toMatchObject({ code: 'ERR_IDEMKIT_INVALID_OPTION' });
    return error as InvalidOptionError;
  }
  throw new Error('expected a refusal');
}

describe('optionReader', () => {
  it('answers the default for an absent option, and undefined without one', () => {
    const read = reader({});
    expect(read.integer('n', { default: 7 })).toBe(7);
    expect(read.integer('m', {})).toBeUndefined();
    expect(read.duration('d', { default: Infinity, infinity: true })).toBe(Infinity);
    expect(read.number('f', { default: 0.5, min: 0, max: 1 })).toBe(0.5);
    expect(read.boolean('b', { default: true })).toBe(true);
    expect(read.oneOf('o', ['a', 'b'], { default: 'b' })).toBe('b');
    const fallback = () => 1;
    expect(read.function('fn', { default: fallback })).toBe(fallback);
    expect(read.function('g')).toBeUndefined();
    expect(read.object('nested')).toBeUndefined();
    read.done();
  });

  it('answers a present valid value as given', () => {
    const fn = () => 2;
    const read = reader({ n: 3, d: 5, i: Infinity, f: 1, b: false, o: 'a', fn, methods: ['post'], header: 'X-Key' });
    expect(read.integer('n', { default: 7, min: 1, max: 3 })).toBe(3);
    expect(read.duration('d', { default: 1 })).toBe(5);
    expect(read.duration('i', { default: 1, infinity: true })).toBe(Infinity);
    expect(read.number('f', { min: 1 })).toBe(1);
    expect(read.boolean('b', { default: true })).toBe(false);
    expect(read.oneOf('o', ['a', 'b'], { default: 'b' })).toBe('a');
    expect(read.function('fn')).toBe(fn);
    expect([...read.methods('methods', ['GET'])]).toEqual(['POST']);
    expect(read.header('header', 'Idempotency-Key')).toBe('X-Key');
    read.done();
  });

  it.each([
    ['a string', { n: '3' }, 'expected an integer >= 1, got 3'],
    ['NaN', { n: NaN }, 'expected an integer >= 1, got NaN'],
    ['Infinity', { n: Infinity }, 'expected an integer >= 1, got Infinity'],
    ['a fraction', { n: 1.5 }, 'expected an integer >= 1, got 1.5'],
    ['below min', { n: 0 }, 'expected an integer >= 1, got 0'],
    ['above max', { n: 11 }, 'expected at most 10, got 11'],
    ['null', { n: null }, 'expected an integer >= 1, got null'],
  ])('integer refuses %s, naming the option', (_what, options, message) => {
    const error = refusal(() => reader(options).integer('n', { default: 5, min: 1, max: 10 }));
    expect(error.option).toBe('n');
    expect(error.message).toBe(`Invalid option \`n\`: ${message}`);
  });

  it('integer with `required` refuses an absent value', () => {
    expect(refusal(() => reader({}).integer('n', { required: true, min: 1 })).message).toContain('got undefined');
    expect(refusal(() => checkInteger('ttlMs', undefined, { required: true, min: 1 })).option).toBe('ttlMs');
  });

  it('duration: Infinity only where allowed, never a finite value a timer cannot hold', () => {
    expect(refusal(() => reader({ d: Infinity }).duration('d', { default: 1 })).message).toContain('expected an integer >= 0, got Infinity');
    expect(reader({ d: MAX_TIMER_MS }).duration('d', { default: 1 })).toBe(MAX_TIMER_MS);
    expect(refusal(() => reader({ d: MAX_TIMER_MS + 1 }).duration('d', { default: 1 })).message).toContain(`expected at most ${MAX_TIMER_MS} ms, got`);
    expect(refusal(() => checkDuration('d', MAX_TIMER_MS + 1, { infinity: true })).message).toContain('(use Infinity for no limit)');
    expect(refusal(() => reader({ d: NaN }).duration('d', { default: 1, infinity: true })).message).toContain('got NaN');
    expect(refusal(() => reader({ d: -1 }).duration('d', { default: 1 })).option).toBe('d');
  });

  it.each([
    [{ f: NaN }, { min: 1 }, 'expected a finite number >= 1, got NaN'],
    [{ f: Infinity }, { min: 1 }, 'expected a finite number >= 1, got Infinity'],
    [{ f: 0.5 }, { min: 1 }, 'expected a finite number >= 1, got 0.5'],
    [{ f: 10 }, { min: 0, max: 1 }, 'expected a number between 0 and 1, got 10'],
    [{ f: 2 }, { max: 1 }, 'expected a finite number <= 1, got 2'],
    [{ f: '1' }, { min: 0 }, 'expected a finite number >= 0, got 1'],
  ])('number refuses %j under %j', (options, rule, message) => {
    expect(refusal(() => reader(options).number('f', rule)).message).toBe(`Invalid option \`f\`: ${message}`);
  });

  it('boolean, oneOf and function refuse the wrong type', () => {
    expect(refusal(() => reader({ b: 'yes' }).boolean('b', { default: true })).message).toBe('Invalid option `b`: expected a boolean, got string');
    expect(refusal(() => reader({ o: 'c' }).oneOf('o', ['a', 'b'], {})).message).toBe('Invalid option `o`: expected \'a\' or \'b\', got "c"');
    expect(refusal(() => reader({ o: 1 }).oneOf('o', ['a', 'b', 'c'], {})).message).toBe("Invalid option `o`: expected 'a', 'b' or 'c', got 1");
    expect(refusal(() => reader({ fn: 'log' }).function('fn')).message).toBe('Invalid option `fn`: expected a function');
    expect(refusal(() => reader({}).function('fn', { required: true, expected: 'a function (event) => void' })).message).toBe(
      'Invalid option `fn`: expected a function (event) => void',
    );
  });

  it('methods and header accept HTTP tokens only', () => {
    expect(refusal(() => reader({ m: 'POST' }).methods('m', [])).option).toBe('m');
    expect(refusal(() => reader({ m: ['PO ST'] }).methods('m', [])).option).toBe('m');
    expect(refusal(() => reader({ h: 'Idempotency Key' }).header('h', 'x')).option).toBe('h');
    expect(refusal(() => reader({ h: '' }).header('h', 'x')).option).toBe('h');
  });

  it('refuses options that are not an object, naming them', () => {
    expect(refusal(() => optionReader('thing()', null as never)).option).toBe('options');
    expect(refusal(() => optionReader('thing()', [] as never)).option).toBe('options');
    expect(refusal(() => optionReader('thing()', 5 as never, { path: 'budget' })).option).toBe('budget');
  });

  it('names nested options by their path, and checks their keys too', () => {
    const nestedOf = (options: Options) => reader(options).object('policy') as unknown as OptionReader<Options>;
    expect(refusal(() => nestedOf({ policy: { minLength: 0 } }).integer('minLength', { min: 1 })).option).toBe('policy.minLength');
    const nested = nestedOf({ policy: { format: 'uuid', extra: 1 } });
    nested.oneOf('format', ['uuid'], {});
    expect(refusal(() => nested.done()).option).toBe('policy.extra');
    expect(refusal(() => reader({ policy: 'x' }).object('policy')).option).toBe('policy');
  });

  it('appends a suffix to every name (a route)', () => {
    const read = optionReader<Options>('config', { required: 'no' }, { path: 'config.idempotency', suffix: ' of /orders' });
    expect(refusal(() => read.boolean('required', { default: true })).option).toBe('config.idempotency.required of /orders');
  });

  describe('done()', () => {
    it('refuses a key nothing read, suggesting the one meant', () => {
      const read = reader({ leaseMS: 5 });
      read.duration('leaseMs', { default: 1 });
      const error = refusal(() => read.done());
      expect(error.option).toBe('leaseMS');
      expect(error.message).toBe('Invalid option `leaseMS`: unknown option; did you mean `leaseMs`?');
    });

    it('accepts keys that were only accepted, or only read raw', () => {
      const read = reader({ documented: 1, raw: 2 });
      read.accept('documented');
      expect(read.value('raw')).toBe(2);
      read.done();
    });

    it('points a known alias at our name', () => {
      const read = optionReader<Options>('thing()', { retry: 3 }, { aliases: { retry: 'retries' } });
      read.integer('retries', { default: 0 });
      expect(refusal(() => read.done()).message).toBe('Invalid option `retry`: unknown option; use `retries`');
    });

    it('lists what the call takes when nothing is close', () => {
      const read = reader({ zzz: 1 });
      read.integer('alpha', {});
      read.boolean('beta', {});
      expect(refusal(() => read.done()).message).toBe('Invalid option `zzz`: unknown option; thing() takes `alpha`, `beta`');
      expect(refusal(() => reader({ zzz: 1 }).done()).message).toContain('thing() takes no options');
    });

    it('refuses an unknown key even when its value is undefined (a typo spread from a config)', () => {
      expect(refusal(() => reader({ leaseMS: undefined }).done()).option).toBe('leaseMS');
    });
  });
});

describe('closestName', () => {
  const known = ['leaseMs', 'windowMs', 'maxBodyBytes', 'maxResponseBytes', 'required', 'retries', 'minLength', 'sweepIntervalMs'];
  it.each([
    ['leaseMS', 'leaseMs'],
    ['lease_ms', 'leaseMs'],
    ['lease', 'leaseMs'],
    ['windowMS', 'windowMs'],
    ['requierd', 'required'],
    ['retires', 'retries'],
    ['minLen', 'minLength'],
    ['sweepInterval', 'sweepIntervalMs'],
    ['maxResponseByte', 'maxResponseBytes'],
    ['MAXBODYBYTES', 'maxBodyBytes'],
  ])('%s → %s', (name, meant) => {
    expect(closestName(name, known)).toBe(meant);
  });

  it.each([['colour'], ['timeout'], ['ab'], ['onFailedAttempt']])('%s → nothing', (name) => {
    expect(closestName(name, known)).toBeUndefined();
  });
});

describe('the HTTP token', () => {
  it('is RFC 9110 tchar+', () => {
    expect(['POST', 'Idempotency-Key', "x!#$%&'*+.^_`|~9"].every(isHttpToken)).toBe(true);
    expect(['', 'a b', 'a:b', 'ä', 'a\n', 5].some((v) => isHttpToken(v))).toBe(false);
    expect(HTTP_TOKEN.test('X-Key')).toBe(true);
  });
});

describe('where it is exported', () => {
  it('idemkit/kit has the reader, and the root does not', () => {
    expect(kit.optionReader).toBe(optionReader);
    expect(kit.checkInteger).toBe(checkInteger);
    expect('optionReader' in root).toBe(false);
  });
});
