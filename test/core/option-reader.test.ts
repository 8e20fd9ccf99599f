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

/*
 * The option kinds only stores, adapters and messaging read (their own suites need services), and
 * the edges of the checks every factory relies on: pinned here so that the unit set reaches them.
 */
describe('read.driver: the driver object a store or integration is given', () => {
  const pool = { query: () => {}, connect: () => {} };

  it('answers the object itself, and marks the key as known', () => {
    const read = reader({ pool });
    expect(read.driver('pool', ['query', 'connect'], 'a Pool')).toBe(pool);
    read.done();
  });

  it('accepts a function that has the methods (a class or a callable client)', () => {
    const callable = Object.assign(() => {}, { query: () => {} });
    expect(reader({ pool: callable }).driver('pool', ['query'], 'a Pool')).toBe(callable);
  });

  it('absent: undefined when optional, refused (saying what was expected) when not', () => {
    expect(reader({}).driver('logger', ['warn'], 'a logger', { optional: true })).toBeUndefined();
    const error = refusal(() => reader({}).driver('pool', ['query'], 'a node-postgres Pool'));
    expect(error.option).toBe('pool');
    expect(error.message).toBe('Invalid option `pool`: expected a node-postgres Pool');
  });

  it.each([['null', null], ['a string', 'postgres://db'], ['a number', 5], ['a boolean', true]])('refuses %s, even when optional', (_what, value) => {
    expect(refusal(() => reader({ pool: value }).driver('pool', ['query'], 'a Pool')).message).toBe('Invalid option `pool`: expected a Pool');
    expect(refusal(() => reader({ pool: value }).driver('pool', ['query'], 'a Pool', { optional: true })).option).toBe('pool');
  });

  it('names the first method the object lacks (a property that is not a function is lacking)', () => {
    expect(refusal(() => reader({ pool: { query: () => {} } }).driver('pool', ['query', 'connect'], 'a Pool')).message).toBe(
      'Invalid option `pool`: expected a Pool (this one has no `connect()` method)',
    );
    expect(refusal(() => reader({ pool: { query: 'SELECT 1', connect: 1 } }).driver('pool', ['query', 'connect'], 'a Pool')).message).toBe(
      'Invalid option `pool`: expected a Pool (this one has no `query()` method)',
    );
  });

  it('says why a look-alike is refused, with the value it was given, before looking at methods', () => {
    const seen: unknown[] = [];
    const refuse = (value: object) => {
      seen.push(value);
      return 'client' in value ? 'this is a Client, not a Pool' : undefined;
    };
    const client = { client: true };
    expect(refusal(() => reader({ pool: client }).driver('pool', ['query'], 'a Pool', { refuse })).message).toBe(
      'Invalid option `pool`: expected a Pool; this is a Client, not a Pool',
    );
    expect(reader({ pool }).driver('pool', ['query'], 'a Pool', { refuse })).toBe(pool);
    expect(seen).toEqual([client, pool]);
  });
});

describe('read.problemTypeBase', () => {
  const base = (value: unknown) => reader({ problemTypeBase: value }).problemTypeBase('problemTypeBase');
  const why = (value: unknown) => {
    const error = refusal(() => base(value));
    expect(error.option).toBe('problemTypeBase');
    return error.message;
  };

  it('answers the default URN base when absent, and names the option by its path', () => {
    expect(reader({}).problemTypeBase('problemTypeBase')).toBe('urn:idemkit:problem:');
    const nested = optionReader<Options>('route()', { problemTypeBase: 5 }, { path: 'config', suffix: ' of /orders' });
    expect(refusal(() => nested.problemTypeBase('problemTypeBase')).option).toBe('config.problemTypeBase of /orders');
  });

  it.each([
    'https://docs.example.com/problems/',
    'https://docs.example.com/problems#',
    'HTTPS://docs.example.com/',
    'a+b.c-d://host/',
    'https://docs.example.com/a%20b/',
    "https://docs.example.com/!$&'()*+,;=@~_.-/",
    'urn:example:problem:',
    'URN:Example:problem:',
    'urn:ab:',
    `urn:${'a'.repeat(32)}:`,
    'urn:a-b:',
    'tag:example.com,2026:problem:',
    'tag:example.com,2026:problems/',
  ])('accepts %s as given', (value) => {
    expect(base(value)).toBe(value);
  });

  it.each([
    ['a number', 5, 'got 5'],
    ['an object', { href: 'https://x.example/' }, 'got {"href":"https://x.example/"}'],
    ['a symbol', Symbol('base'), 'got Symbol(base)'],
    ['a space', 'https://docs.example.com/my problems/', 'got "https://docs.example.com/my problems/"'],
    ['a non-ASCII character', 'https://docs.example.com/é/', 'got'],
    ['a relative reference', '/problems/', 'got "/problems/"'],
    ['a scheme starting with a digit', '1http://x.example/', 'got'],
    ['an empty scheme', '://x.example/', 'got'],
    ['the empty string', '', 'got ""'],
  ])('refuses %s as not an absolute URI', (_what, value, got) => {
    const message = why(value);
    expect(message).toMatch(/^Invalid option `problemTypeBase`: expected an absolute URI ending in `\/` or `#`/);
    expect(message).toContain(got);
    // Not one of the specific reasons below: the value is not a URI at all.
    expect(message).not.toMatch(/; (a URN|the base|a `#`|it is not)/);
  });

  it.each([
    ['https://docs.example.com/errors', 'the base must end in `/` or `#`'],
    ['https://docs.example.com:', 'the base must end in `/` or `#`'],
    ['https://docs.example.com/errors/?v=1/', 'the base has no query (`?`)'],
    ['https://docs.example.com/?#', 'the base has no query (`?`)'],
    ['https://docs.example.com/#errors/', 'a `#` may only end the base'],
    ['https://docs.example.com/#a#', 'a `#` may only end the base'],
    ['http://[/', 'it is not an absolute URI'],
    ['urn:example:problem', 'a URN base ends in `:`'],
    ['urn:example:problem/', 'a URN base ends in `:`'],
    ['urn::problem:', 'a URN starts `urn:<namespace>:`'],
    ['urn:a:problem:', 'a URN starts `urn:<namespace>:`'],
    ['urn:-ab:problem:', 'a URN starts `urn:<namespace>:`'],
    ['urn:ab-:problem:', 'a URN starts `urn:<namespace>:`'],
    [`urn:${'a'.repeat(33)}:`, 'a URN starts `urn:<namespace>:`'],
    ['urn:a_b:problem:', 'a URN starts `urn:<namespace>:`'],
    ['urn:example:problem#:', 'a URN base has no `?` or `#`'],
    ['urn:example:problem?:', 'a URN base has no `?` or `#`'],
  ])('refuses %s: %s', (value, reason) => {
    expect(why(value)).toContain(`; ${reason}, got ${JSON.stringify(value)}`);
  });
});

describe('the checks at their edges', () => {
  it('integer: min defaults to 0, max is inclusive, a default is only for an absent value', () => {
    expect(reader({ n: 0 }).integer('n', {})).toBe(0);
    expect(refusal(() => reader({ n: -1 }).integer('n', {})).message).toBe('Invalid option `n`: expected an integer >= 0, got -1');
    expect(reader({ n: Number.MAX_SAFE_INTEGER }).integer('n', {})).toBe(Number.MAX_SAFE_INTEGER);
    expect(refusal(() => reader({ n: 2 ** 53 }).integer('n', {})).option).toBe('n');
    expect(reader({ n: 10 }).integer('n', { max: 10 })).toBe(10);
    expect(reader({ n: 0 }).integer('n', { default: 7 })).toBe(0);
  });

  it('duration: its own min, `required`, and Infinity refused unless allowed', () => {
    expect(refusal(() => reader({ d: 9 }).duration('d', { min: 10 })).message).toBe('Invalid option `d`: expected an integer >= 10, got 9');
    expect(reader({ d: 10 }).duration('d', { min: 10 })).toBe(10);
    expect(reader({}).duration('d', {})).toBeUndefined();
    expect(reader({}).duration('d', { default: 5 })).toBe(5);
    expect(refusal(() => reader({}).duration('d', { required: true, default: 5 })).message).toContain('got undefined');
    expect(refusal(() => reader({ d: Infinity }).duration('d', { infinity: false })).message).toContain('got Infinity');
    expect(refusal(() => reader({ d: -Infinity }).duration('d', { infinity: true })).message).toContain('got -Infinity');
    expect(refusal(() => checkDuration('d', MAX_TIMER_MS + 1, {})).message).toBe(`Invalid option \`d\`: expected at most ${MAX_TIMER_MS} ms, got ${MAX_TIMER_MS + 1}`);
  });

  it('number: both bounds inclusive, either may be left out, `required` refuses absence', () => {
    expect(reader({ f: 0 }).number('f', { min: 0, max: 1 })).toBe(0);
    expect(reader({ f: 1 }).number('f', { min: 0, max: 1 })).toBe(1);
    expect(reader({ f: -1e300 }).number('f', { max: 1 })).toBe(-1e300);
    expect(reader({ f: 1e300 }).number('f', {})).toBe(1e300);
    expect(refusal(() => reader({ f: -0.5 }).number('f', { min: 0, max: 1 })).message).toBe('Invalid option `f`: expected a number between 0 and 1, got -0.5');
    expect(refusal(() => reader({ f: -Infinity }).number('f', {})).message).toBe('Invalid option `f`: expected a finite number >= -Infinity, got -Infinity');
    expect(refusal(() => reader({}).number('f', { required: true, min: 0 })).message).toContain('got undefined');
  });

  it('boolean: `required` refuses absence; oneOf of a single value; function with a default and `required`', () => {
    expect(refusal(() => reader({}).boolean('b', { required: true })).message).toBe('Invalid option `b`: expected a boolean, got undefined');
    expect(reader({}).boolean('b', {})).toBeUndefined();
    expect(refusal(() => reader({ o: 'b' }).oneOf('o', ['a'], {})).message).toBe('Invalid option `o`: expected \'a\', got "b"');
    expect(refusal(() => reader({}).oneOf('o', ['a', 'b'], { required: true, default: 'a' })).message).toBe("Invalid option `o`: expected 'a' or 'b', got undefined");
    expect(refusal(() => reader({}).function('fn', { required: true })).message).toBe('Invalid option `fn`: expected a function');
    const given = () => 1;
    expect(reader({ fn: given }).function('fn', { default: () => 2 })).toBe(given);
  });

  it('methods and header fall back when absent, and methods are upper-cased', () => {
    expect([...reader({}).methods('m', ['post', 'Patch'])]).toEqual(['POST', 'PATCH']);
    expect(reader({}).header('h', 'Idempotency-Key')).toBe('Idempotency-Key');
    expect(refusal(() => reader({ m: 'POST' }).methods('m', [])).message).toBe('Invalid option `m`: expected an array of HTTP method names');
    expect(refusal(() => reader({ h: 5 }).header('h', 'x')).message).toBe('Invalid option `h`: expected a header name');
  });

  it('name() and fail() name the option with its path and suffix; a non-object names it with the suffix too', () => {
    const read = optionReader<Options>('route()', {}, { path: 'config.idempotency', suffix: ' of /orders' });
    expect(read.name('leaseMs')).toBe('config.idempotency.leaseMs of /orders');
    expect(refusal(() => read.fail('leaseMs', 'too long')).message).toBe('Invalid option `config.idempotency.leaseMs of /orders`: too long');
    expect(reader({}).name('leaseMs')).toBe('leaseMs');
    expect(refusal(() => optionReader('route()', 'x' as never, { path: 'config', suffix: ' of /orders' })).option).toBe('config of /orders');
    expect(refusal(() => optionReader('route()', 'x' as never, { suffix: ' of /orders' })).option).toBe('options of /orders');
  });

  it('a nested reader keeps the suffix, and says its owner (the option, named in full) takes no options', () => {
    const nested = optionReader<Options>('route()', { policy: { zzz: 1 } }, { suffix: ' of /orders' }).object('policy') as unknown as OptionReader<Options>;
    expect(nested.name('minLength')).toBe('policy.minLength of /orders');
    const error = refusal(() => nested.done());
    expect(error.option).toBe('policy.zzz of /orders');
    expect(error.message).toBe('Invalid option `policy.zzz of /orders`: unknown option; `policy of /orders` takes no options');
  });

  it("done(): a key read twice is listed once; Object.prototype's names are not aliases", () => {
    const read = reader({ zzz: 1 });
    read.integer('alpha', {});
    read.integer('alpha', {});
    expect(refusal(() => read.done()).message).toBe('Invalid option `zzz`: unknown option; thing() takes `alpha`');
    const inherited = optionReader<Options>('thing()', { constructor: 1 }, { aliases: { retry: 'retries' } });
    inherited.integer('retries', {});
    expect(refusal(() => inherited.done()).message).toBe('Invalid option `constructor`: unknown option; thing() takes `retries`');
  });
});

describe('closestName at its limits', () => {
  it('allows 1 edit under 5 letters, 2 under 9, 3 from 9', () => {
    expect(closestName('abxd', ['abcd'])).toBe('abcd');
    expect(closestName('axyd', ['abcd'])).toBeUndefined();
    expect(closestName('abxye', ['abcde'])).toBe('abcde');
    expect(closestName('axyze', ['abcde'])).toBeUndefined();
    expect(closestName('abxyzfgh', ['abcdefgh'])).toBeUndefined();
    expect(closestName('abcxyzghi', ['abcdefghi'])).toBe('abcdefghi');
    expect(closestName('abwxyzghi', ['abcdefghi'])).toBeUndefined();
  });

  it('counts a prefix of 3 or more letters as one edit, an exact fold as none, and keeps the first of equals', () => {
    expect(closestName('le', ['leaseMs'])).toBeUndefined();
    expect(closestName('lea', ['leaseMs'])).toBe('leaseMs');
    // The exact fold beats a prefix met first.
    expect(closestName('LEASE_MS', ['leaseMsMax', 'leaseMs'])).toBe('leaseMs');
    // Two at one edit each: the first listed.
    expect(closestName('leasMs', ['leaseMs', 'leasMss'])).toBe('leaseMs');
    // A transposition is one edit, at any position.
    expect(closestName('elaseMs', ['leaseMs'])).toBe('leaseMs');
    expect(closestName('leaesMs', ['leaseMs'])).toBe('leaseMs');
    expect(closestName('abdc', ['abcd'])).toBe('abcd');
  });

  it('finds the candidate whose edits are all at the end or all at the start', () => {
    expect(closestName('windowMsxx', ['windowMs'])).toBe('windowMs');
    expect(closestName('xxwindowMs', ['windowMs'])).toBe('windowMs');
    expect(closestName('indowMs', ['windowMs'])).toBe('windowMs');
  });
});
