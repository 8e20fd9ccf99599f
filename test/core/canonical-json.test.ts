import canonicalize from 'canonicalize';
import { describe, expect, it, vi } from 'vitest';
import {
  canonicalJson,
  canonicalJsonText,
  canonicalNumber,
  ExactNumber,
  inCanonicalOrder,
  parseJsonExact,
  parseJsonKeepingDigits,
  readCanonicalJson,
  writeRecursive,
} from '../../src/core/canonical-json.js';
import { MAY_LOSE_DIGITS } from '../../src/core/json-read.js';

/** A small seeded PRNG, so a failing case can be replayed. */
function prng(seed: number) {
  return () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
}

const STRINGS = ['', 'a', 'é', '€', '😀', '\u0000', '\u001f', '"', '\\', '\u2028', 'Z', 'aa', '\ud83d\ude00x', '10', 'b', '__proto__'];
const NUMBERS = [0, -0, 1, -1, 1.5, 1e21, 1e-7, 123456789012345680000, 5e-324, 1.7976931348623157e308, 333333333.3333333, 0.1 + 0.2];

function randomJson(next: () => number, depth: number): unknown {
  const pick = <T>(list: readonly T[]) => list[Math.floor(next() * list.length)]!;
  const kind = Math.floor(next() * (depth > 3 ? 4 : 6));
  switch (kind) {
    case 0:
      return pick(STRINGS) + pick(STRINGS);
    case 1:
      return pick(NUMBERS);
    case 2:
      return pick([true, false, null]);
    case 3:
      return Math.floor(next() * 1e6) / 100;
    case 4:
      return Array.from({ length: Math.floor(next() * 4) }, () => randomJson(next, depth + 1));
    default: {
      const out: Record<string, unknown> = {};
      for (let i = Math.floor(next() * 5); i > 0; i--) out[pick(STRINGS) + pick(STRINGS)] = randomJson(next, depth + 1);
      return out;
    }
  }
}

/** JSON text of a value with random whitespace, and number spellings a client might use. */
function randomText(next: () => number, depth: number): string {
  const space = () => [' ', '', '\n', '\t ', '\r\n'][Math.floor(next() * 5)]!;
  const kind = Math.floor(next() * (depth > 3 ? 4 : 6));
  switch (kind) {
    case 0:
      return JSON.stringify(STRINGS[Math.floor(next() * STRINGS.length)]! + STRINGS[Math.floor(next() * STRINGS.length)]!);
    case 1:
      return randomNumberToken(next);
    case 2:
      return ['true', 'false', 'null'][Math.floor(next() * 3)]!;
    case 3:
      // An escaped key or string, so the reader's escaped path is compared too.
      return ['"\\u00e9"', '"a\\nb"', '"\\ud83d\\ude00"', '"\\ud800"', '"\\/"', '"\\"x"'][Math.floor(next() * 6)]!;
    case 4:
      return `[${space()}${Array.from({ length: Math.floor(next() * 4) }, () => randomText(next, depth + 1)).join(`${space()},${space()}`)}${space()}]`;
    default: {
      const members = Array.from({ length: Math.floor(next() * 5) }, () => {
        const key = next() < 0.2 ? '"\\u0061"' : JSON.stringify(STRINGS[Math.floor(next() * STRINGS.length)]!);
        return `${key}${space()}:${space()}${randomText(next, depth + 1)}`;
      });
      return `{${space()}${members.join(`${space()},${space()}`)}${space()}}`;
    }
  }
}

/** A JSON number token: up to 25 digits, a random point, leading/trailing zeros, an exponent. */
function randomNumberToken(next: () => number): string {
  const digit = () => String(Math.floor(next() * 10));
  const count = 1 + Math.floor(next() * (next() < 0.5 ? 6 : 25));
  let digits = '';
  for (let i = 0; i < count; i++) digits += digit();
  digits = digits.replace(/^0+(?=\d)/, '');
  let token = (next() < 0.3 ? '-' : '') + digits;
  if (next() < 0.4) token += '.' + digit() + (next() < 0.5 ? '0'.repeat(Math.floor(next() * 3)) : digit());
  if (next() < 0.3) token += ['e', 'E'][Math.floor(next() * 2)]! + ['', '+', '-'][Math.floor(next() * 3)]! + Math.floor(next() * 40);
  return token;
}

/** The exact value of a number token × 10^200, as a BigInt (for tokens with |exponent| < 100). */
function scaled(token: string): bigint {
  const [, sign, whole, fraction = '', exponent = '0'] = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(token)!;
  const shift = 200 + Number(exponent) - fraction.length;
  const magnitude = BigInt(whole + fraction) * 10n ** BigInt(shift);
  return sign === '-' ? -magnitude : magnitude;
}

describe('canonicalJson (RFC 8785) of parsed values', () => {
  it('matches the canonicalize package on 5000 random parsed JSON values', () => {
    const next = prng(20261129);
    for (let i = 0; i < 5000; i++) {
      const value = JSON.parse(JSON.stringify(randomJson(next, 0))) as unknown;
      expect(canonicalJson(value), JSON.stringify(value)).toBe(canonicalize(value));
    }
  });

  it('matches it on 5000 random values whose keys are already in order (written by JSON.stringify)', () => {
    const sortedCopy = (value: unknown): unknown => {
      if (Array.isArray(value)) return value.map(sortedCopy);
      if (value === null || typeof value !== 'object') return value;
      const out: Record<string, unknown> = {};
      for (const key of Object.keys(value).sort()) out[key] = sortedCopy((value as Record<string, unknown>)[key]);
      return out;
    };
    const next = prng(20261130);
    let inOrder = 0;
    for (let i = 0; i < 5000; i++) {
      const value = sortedCopy(JSON.parse(JSON.stringify(randomJson(next, 0))));
      // Integer-like keys ("10") go first in JS objects whatever the insertion order: not in order.
      if (JSON.stringify(value) === canonicalize(value)) inOrder++;
      expect(canonicalJson(value), JSON.stringify(value)).toBe(canonicalize(value));
    }
    expect(inOrder).toBeGreaterThan(4000);
  });

  it('sorts keys by UTF-16 code units, as RFC 8785 §3.2.3 says', () => {
    // The RFC's own example: "\u20ac" (€) sorts after "\ud83d\ude00" (😀) in UTF-16 order.
    const value = { '\u20ac': 'Euro Sign', '\r': 'Carriage Return', '\ufb33': 'Hebrew Letter Dalet With Dagesh', '1': 'One', '\ud83d\ude00': 'Emoji: Grinning Face', '\u0080': 'Control', '\u00f6': 'Latin Small Letter O With Diaeresis' };
    const keys = Object.keys(JSON.parse(canonicalJson(value)) as object);
    expect(canonicalJson(value)).toBe(canonicalize(value));
    expect(keys.indexOf('\ud83d\ude00')).toBeLessThan(keys.indexOf('\ufb33'));
  });

  it('writes numbers in their ECMAScript form', () => {
    expect(canonicalJson([1e21, 1e-7, -0, 100.0, 5e-324])).toBe('[1e+21,1e-7,0,100,5e-324]');
  });

  it('skips undefined members and writes undefined array items as null, like JSON.stringify', () => {
    expect(canonicalJson({ b: undefined, a: [undefined, 1] })).toBe('{"a":[null,1]}');
  });

  it('never throws, and writes what JSON has no form for in forms no JSON value has', () => {
    // BigInt (a custom parser's), tagged: 1n is not 1.
    expect(canonicalJson(1n)).toBe('1n');
    expect(canonicalJson({ amount: 9007199254740993n })).toBe('{"amount":9007199254740993n}');
    expect(canonicalJson({ amount: 1n })).not.toBe(canonicalJson({ amount: 1 }));
    expect(canonicalJson({ amount: 1n })).not.toBe(canonicalJson({ amount: '1n' }));
    expect(canonicalJson([Number.NaN, Infinity, -Infinity])).toBe('[NaN,Infinity,-Infinity]');
    // Lone surrogates escaped as JSON.stringify escapes them; distinct from each other.
    expect(canonicalJson({ a: '\ud800' })).toBe('{"a":"\\ud800"}');
    expect(canonicalJson({ ['\udc00']: 1 })).toBe('{"\\udc00":1}');
    expect(canonicalJson('\ud800')).not.toBe(canonicalJson('\ud801'));
    const circular: Record<string, unknown> = { a: 1 };
    circular.self = circular;
    expect(canonicalJson(circular)).toBe('{"a":1,"self":!cycle}');
    // The same object twice (not a cycle) is written twice.
    const shared = { x: 1 };
    expect(canonicalJson({ a: shared, b: shared })).toBe('{"a":{"x":1},"b":{"x":1}}');
    expect(canonicalJson({ d: new Date(0) })).toBe('{"d":"1970-01-01T00:00:00.000Z"}');
    const throwing = {
      b: 1,
      a: {
        toJSON() {
          throw new Error('no');
        },
      },
    };
    expect(canonicalJson(throwing)).toBe('{"a":!toJSON,"b":1}');
    const getter = Object.defineProperty({ a: 1 }, 'b', {
      enumerable: true,
      get() {
        throw new Error('no');
      },
    });
    expect(canonicalJson(getter)).toBe('{"a":1}');
    expect(canonicalJson(undefined)).toBe('undefined');
    expect(canonicalJson(Symbol('s'))).toBe('undefined');
  });

  it('writes values of any depth (iteratively past 1000 levels), the same as the text they came from', () => {
    for (const depth of [999, 1000, 1001, 1002, 6000, 100_000]) {
      const arrays = '['.repeat(depth) + '1' + ']'.repeat(depth);
      expect(canonicalJson(JSON.parse(arrays))).toBe(arrays);
      const objects = '{"b":0,"a":'.repeat(depth) + '1' + '}'.repeat(depth);
      const sorted = '{"a":'.repeat(depth) + '1' + ',"b":0}'.repeat(depth);
      expect(canonicalJson(JSON.parse(objects))).toBe(sorted);
      expect(canonicalJsonText(objects)).toBe(sorted);
      expect(readCanonicalJson(objects)).toBe(sorted);
    }
  });
});

/** Each number text, and the text canonicalNumber writes for it. */
function expectWritten(pairs: ReadonlyArray<readonly [text: string, written: string]>): void {
  for (const [text, written] of pairs) expect(canonicalNumber(text), text).toBe(written);
}

describe('canonicalNumber: exact decimal values, written as ECMAScript writes numbers', () => {
  it('counts only an exponent’s significant digits: leading zeros never change the text', () => {
    for (const spelling of ['1e0000000000000000', '1e-0000000000000000000', '1e+00000000000000000000000', '10e-00000000000000001']) expect(canonicalNumber(spelling), spelling).toBe('1');
    expect(canonicalNumber('1.5e00000000000000000002')).toBe('150');
    expect(canonicalNumber('1e-00000000000000000007')).toBe('1e-7');
    // A long exponent that is long after its zeros too still takes the exact path.
    expect(canonicalNumber('1e0001000000000000000')).toBe('1e+1000000000000000');
  });

  it('gives one text to every spelling of one value', () => {
    for (const spelling of ['1', '1.0', '1e0', '10e-1', '0.1e1', '1.000', '100e-2', '1E0', '1e+0', '0.001e3']) expect(canonicalNumber(spelling), spelling).toBe('1');
    expectWritten([
      ['-0', '0'],
      ['-0.0e5', '0'],
      ['0e-7', '0'],
      ['1E+2', '100'],
      ['12.50', '12.5'],
      ['2500.00', '2500'],
    ]);
  });

  it('keeps apart values that one double cannot tell apart', () => {
    expectWritten([
      ['9007199254740993', '9007199254740993'],
      ['9007199254740992', '9007199254740992'],
      ['0.10000000000000001', '0.10000000000000001'],
      ['0.1', '0.1'],
      ['123456789012345678901', '123456789012345678901'],
      ['1234567890123456789012', '1.234567890123456789012e+21'],
      // Past the range of doubles (Infinity and 0 as doubles).
      ['1e400', '1e+400'],
      ['-1e400', '-1e+400'],
      ['1e-400', '1e-400'],
      ['1e99999999999999999999', '1e+99999999999999999999'],
      ['-12.340e-99999999999999999999', '-1.234e-99999999999999999998'],
    ]);
  });

  it('writes exponents of more than 15 digits (computed with BigInt) from the value, signed or not, and its digits from the first non-zero one', () => {
    expectWritten([
      ['1e9999999999999999', '1e+9999999999999999'],
      ['12.5e1234567890123456789', '1.25e+1234567890123456790'],
      ['0.05e1234567890123456789', '5e+1234567890123456787'],
      ['-0.05e-1234567890123456789', '-5e-1234567890123456791'],
      // 15 digits: a double holds the exponent, and the value's own form is kept.
      ['1e000000000000000', '1'],
      ['1e000000000000021', '1e+21'],
    ]);
  });

  it('writes 21 integer digits with a fraction in decimal form, as Number::toString does', () => {
    expectWritten([
      ['123456789012345678901.5', '123456789012345678901.5'],
      ['-123456789012345678901.25e0', '-123456789012345678901.25'],
    ]);
  });

  it('refuses what is not a JSON number token', () => {
    for (const token of ['1.', '.5', 'e5', '1e', '--1', 'NaN', '']) expect(() => canonicalNumber(token), token).toThrow(`not a JSON number: ${token}`);
  });

  it('ExactNumber is its text to JSON.stringify (a string), and its value to canonicalJson', () => {
    expect(JSON.stringify({ n: new ExactNumber('1.5') })).toBe('{"n":"1.5"}');
    expect(canonicalJson({ n: new ExactNumber('1.5') })).toBe('{"n":1.5}');
  });

  it('follows ECMAScript Number::toString for where the exponent form starts', () => {
    expect(['1e20', '1e21', '1e-6', '1e-7', '0.0000015', '123e-9'].map(canonicalNumber)).toEqual([
      '100000000000000000000',
      '1e+21',
      '0.000001',
      '1e-7',
      '0.0000015',
      '1.23e-7',
    ]);
  });

  it('is RFC 8785 (the double\'s ECMAScript form) for every number with at most 15 significant digits', () => {
    const next = prng(7);
    for (let i = 0; i < 20_000; i++) {
      const token = randomNumberToken(next);
      const significant = token.replace(/[eE].*$/, '').replace(/[-.]/g, '').replace(/^0+/, '').replace(/0+$/, '');
      if (significant.length > 15) continue;
      expect(canonicalNumber(token), token).toBe(JSON.stringify(JSON.parse(token)));
    }
  });

  it('gives two tokens one text exactly when their decimal values are equal (20,000 random pairs)', () => {
    const next = prng(11);
    let equalPairs = 0;
    for (let i = 0; i < 20_000; i++) {
      const a = randomNumberToken(next);
      // Half the pairs are respellings of one value: digits moved across the point and exponent.
      const b = next() < 0.5 ? respell(a, next) : randomNumberToken(next);
      const same = scaled(a) === scaled(b);
      if (same) equalPairs++;
      expect(canonicalNumber(a) === canonicalNumber(b), `${a} vs ${b}`).toBe(same);
      // The canonical text is itself a token of the same value, and canonical.
      expect(scaled(canonicalNumber(a)), a).toBe(scaled(a));
      expect(canonicalNumber(canonicalNumber(a))).toBe(canonicalNumber(a));
    }
    expect(equalPairs).toBeGreaterThan(5000);
  });
});

/** The same value as `token`, spelt otherwise: trailing zeros, the point moved, the exponent made up for it. */
function respell(token: string, next: () => number): string {
  const [, sign, whole = '', fraction = '', exponent = '0'] = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(token)!;
  const digits = whole + fraction + '0'.repeat(Math.floor(next() * 3));
  const point = 1 + Math.floor(next() * digits.length);
  const integer = digits.slice(0, point).replace(/^0+(?=\d)/, '');
  const rest = digits.slice(point);
  return `${sign}${integer}${rest ? '.' + rest : ''}e${Number(exponent) + whole.length - point}`;
}

describe('canonicalJsonText', () => {
  it('matches canonicalize of JSON.parse on 5000 random texts (spaces, escapes, spellings) where no digits are lost', () => {
    const next = prng(20261201);
    let compared = 0;
    for (let i = 0; i < 5000; i++) {
      const text = randomText(next, 0);
      const parsed = JSON.parse(text) as unknown;
      // A stretch of 16 digits (and points) may hold a number with more digits than a double.
      if (/\d[\d.]{14}\d/.test(text)) continue;
      // canonicalize refuses lone surrogates (RFC 8785 has no form for them).
      if (text.includes('\\ud800')) continue;
      compared++;
      expect(canonicalJsonText(text), text).toBe(canonicalize(parsed));
    }
    expect(compared).toBeGreaterThan(3000);
  });

  it('gives the same text by both of its paths (JSON.parse, and the exact reader) on 5000 random texts', () => {
    const next = prng(20261202);
    for (let i = 0; i < 5000; i++) {
      const text = randomText(next, 0);
      const exact = readCanonicalJson(text);
      expect(canonicalJsonText(text), text).toBe(exact);
      expect(canonicalJsonText(text, { value: JSON.parse(text) }), text).toBe(exact);
      // And the exact value tree writes the same text.
      expect(canonicalJson(parseJsonExact(text)!.value), text).toBe(exact);
      expect(canonicalJson(parseJsonKeepingDigits(text)!.value), text).toBe(exact);
    }
  });

  it('reads by its own digits every number with a 3-digit exponent, and not an id in a string that looks like one', () => {
    for (const text of ['1e100', '[1e100]', '{"a":1e100}', '{"a": -1.5E+300}', '{"a":[1,2e-123]}', '\t1e200', '{"a":0.5e100}', '{"a":\n1e999}', '[1,\r-2E0100]']) {
      expect(MAY_LOSE_DIGITS.test(text), text).toBe(true);
    }
    // Hex and base-36 ids (Stripe's, a hash's) often hold an `e` and three digits.
    for (const text of ['{"customer":"cus_8e03978e"}', '{"id":"ab_1e234"}', '{"a":1e99}', '["x-1e100"]']) {
      expect(MAY_LOSE_DIGITS.test(text), text).toBe(false);
      expect(canonicalJsonText(text), text).toBe(readCanonicalJson(text));
    }
  });

  it('keeps every digit of numbers a double cannot hold, wherever they are', () => {
    expect(canonicalJsonText('{"amount":9007199254740993}')).toBe('{"amount":9007199254740993}');
    expect(canonicalJsonText('{"amount":9007199254740993}')).not.toBe(canonicalJsonText('{"amount":9007199254740992}'));
    expect(canonicalJsonText('[0.10000000000000001]')).not.toBe(canonicalJsonText('[0.1]'));
    expect(canonicalJsonText('[123456789.1234567]')).toBe('[123456789.1234567]');
    expect(canonicalJsonText('{"b":1e400,"a":-1e-400}')).toBe('{"a":-1e-400,"b":1e+400}');
    // Even when a parsed value is offered, which has lost them.
    const text = '{"amount":9007199254740993}';
    expect(canonicalJsonText(text, { value: JSON.parse(text) })).toBe('{"amount":9007199254740993}');
    expect(canonicalJson(parseJsonKeepingDigits(text, { value: JSON.parse(text) })!.value)).toBe('{"amount":9007199254740993}');
    // Spellings of one value are one text.
    expect(canonicalJsonText('{"a":[1.0,1e0,10e-1,-0,2500.00]}')).toBe('{"a":[1,1,1,0,2500]}');
    expect(readCanonicalJson('{"a":[1.0,1e0,10e-1,-0,2500.00]}')).toBe('{"a":[1,1,1,0,2500]}');
  });

  it('keeps the last of a repeated key, as JSON.parse does', () => {
    const text = '{"a":1,"b":2,"a":3,"c":{"x":1,"x":[2]},"a":4}';
    expect(readCanonicalJson(text)).toBe('{"a":4,"b":2,"c":{"x":[2]}}');
    expect(canonicalJsonText(text)).toBe(canonicalize(JSON.parse(text)));
    expect(readCanonicalJson('{"__proto__":1,"a":2}')).toBe('{"__proto__":1,"a":2}');
  });

  it('answers undefined for text that is not JSON', () => {
    for (const text of ['', ' ', '{', '}', '{"a"}', '{"a":1,}', '[1,]', '[,1]', '01', '-', '1.', '.5', '+1', '1e', '"\u0001"', 'tru', 'nul', 'NaN', 'Infinity', '[1 2]', '{"a":1}x', '{"a" 1}', '{a:1}', "'a'", '"\\x"', '"\\u12"', '[', '{"a":1', '"abc', '[1]]', '{}{}'])
      expect(readCanonicalJson(text), JSON.stringify(text)).toBeUndefined();
    for (const text of ['[1]]', '{"a":1', '01', "'a'"]) expect(canonicalJsonText(text)).toBeUndefined();
  });

  it('escapes lone surrogates however they came (escaped in the text, or raw in the string)', () => {
    expect(readCanonicalJson('["\\ud800", "\\uD800"]')).toBe('["\\ud800","\\ud800"]');
    expect(readCanonicalJson('["\ud800"]')).toBe('["\\ud800"]');
    expect(canonicalJsonText('{"\\udc00":1}')).toBe('{"\\udc00":1}');
  });
});

/**
 * `canonicalJson` has three writers (JSON.stringify when the keys are in order already, a recursive
 * walk, an iterative one for what neither takes: BigInt, NaN, depth past 1,000); whichever a value
 * goes through, what JSON.stringify skips, nulls or calls `toJSON` on is treated as JSON.stringify
 * treats it. Each value below is written in order (`{"a":…}`), out of order (`{"b":0,"a":…}`),
 * beside a BigInt (`{"a":…,"z":1n}`) and 1,001 arrays deep.
 */
describe('canonicalJson writes what JSON.stringify treats specially alike by each of its writers', () => {
  const fn = () => 1;
  const symbol = Symbol('s');
  const nested = (depth: number, inner: string) => '['.repeat(depth) + inner + ']'.repeat(depth);
  const deep = (depth: number, value: unknown): unknown => {
    let out = value;
    for (let i = 0; i < depth; i++) out = [out];
    return out;
  };
  it.each([
    ['a function', fn, undefined],
    ['a symbol', symbol, undefined],
    ['undefined', undefined, undefined],
    ['an array of them', [fn, symbol, undefined, 1], '[null,null,null,1]'],
    ['an object of them', { c: fn, b: symbol, a: undefined, d: 1 }, '{"d":1}'],
    ['a Date', new Date(0), '"1970-01-01T00:00:00.000Z"'],
    ['a toJSON given its key', { toJSON: (key: string) => `key:${key}` }, '"key:a"'],
    ['a toJSON in an array, given its index', [{ toJSON: (key: string) => `key:${key}` }], '["key:0"]'],
    ['a toJSON that returns undefined', { toJSON: () => undefined }, undefined],
    ['booleans and null', [true, false, null], '[true,false,null]'],
    ['an object out of order inside an array', [{ y: 1, x: [{ q: 2, p: 3 }] }], '[{"x":[{"p":3,"q":2}],"y":1}]'],
    ['-0 and large and small numbers', [-0, 1e21, 1e-7, 0.1], '[0,1e+21,1e-7,0.1]'],
    ['an empty array and object', [[], {}], '[[],{}]'],
  ])('%s', (_what, value, written) => {
    const member = written === undefined ? '' : `"a":${written}`;
    expect(canonicalJson({ a: value })).toBe(`{${member}}`);
    expect(canonicalJson({ b: 0, a: value })).toBe(`{${member === '' ? '' : member + ','}"b":0}`);
    expect(canonicalJson({ a: value, z: 1n })).toBe(`{${member === '' ? '' : member + ','}"z":1n}`);
    expect(canonicalJson(deep(1001, { a: value }))).toBe(nested(1001, `{${member}}`));
    // The value on its own: what JSON.stringify leaves out is written `undefined`.
    expect(canonicalJson(value)).toBe(written === undefined ? 'undefined' : written.replace('key:a', 'key:'));
  });

  it('passes toJSON the key JSON.stringify passes: "" for the whole value, the member name, the index', () => {
    const keyed = { toJSON: (key: string) => `key:${key}` };
    expect(canonicalJson(keyed)).toBe(JSON.stringify(keyed));
    expect(canonicalJson({ m: keyed, z: 1n })).toBe('{"m":"key:m","z":1n}');
    expect(canonicalJson([1n, keyed])).toBe('[1n,"key:1"]');
  });

  it('calls a toJSON a BigInt is given (as some apps define BigInt.prototype.toJSON), as JSON.stringify does', () => {
    const proto = BigInt.prototype as { toJSON?: () => string };
    proto.toJSON = function (this: bigint) {
      return `${this.toString()}`;
    };
    try {
      expect(canonicalJson({ amount: 5n })).toBe(JSON.stringify({ amount: 5n }));
      expect(canonicalJson({ amount: 5n })).toBe('{"amount":"5"}');
    } finally {
      delete proto.toJSON;
    }
    expect(canonicalJson({ amount: 5n })).toBe('{"amount":5n}');
  });

  it('writes a proxy that refuses to list its keys as empty, and a member whose read throws as absent', () => {
    const refusing = new Proxy({ a: 1 }, {
      ownKeys() {
        throw new Error('no');
      },
    });
    expect(canonicalJson({ p: refusing, z: 1n })).toBe('{"p":{},"z":1n}');
    const noLength = new Proxy([1, 2], {
      get(target, property) {
        if (property === 'length') throw new Error('no');
        return Reflect.get(target, property) as unknown;
      },
    });
    expect(canonicalJson({ p: noLength, z: 1n })).toBe('{"p":[],"z":1n}');
    const throwingItem = new Proxy([1, 2], {
      get(target, property) {
        if (property === '1') throw new Error('no');
        return Reflect.get(target, property) as unknown;
      },
    });
    expect(canonicalJson([throwingItem, 1n])).toBe('[[1,null],1n]');
  });

  it('writes a cycle as `!cycle` wherever it closes, and an object met twice on different paths twice', () => {
    const loop: unknown[] = [1];
    loop.push(loop);
    expect(canonicalJson(loop)).toBe('[1,!cycle]');
    const shared = { x: 1n };
    expect(canonicalJson([shared, [shared]])).toBe('[{"x":1n},[{"x":1n}]]');
  });

  it('sorts keys by UTF-16 code units in each writer, including keys past the BMP and a numeric-looking one', () => {
    const value = { '\ufb33': 1, '\ud83d\ude00': 2, b: 3, '10': 4, a: 5 };
    const sorted = '{"10":4,"a":5,"b":3,"\ud83d\ude00":2,"\ufb33":1}';
    expect(canonicalJson(value)).toBe(sorted);
    expect(canonicalJson({ ...value, '\uffff': 1n })).toBe(sorted.slice(0, -1) + ',"\uffff":1n}');
    expect(canonicalJson(deep(1001, value))).toBe(nested(1001, sorted));
  });
});

describe('parseJsonExact', () => {
  it('keeps numbers as their canonical text, literals as values, and a __proto__ key as a member', () => {
    const parsed = parseJsonExact('{"__proto__":{"x":1},"n":1.50,"t":true,"f":false,"z":null,"s":"\\u00e9","a":[],"o":{}}')!.value as Record<string, unknown>;
    expect(Object.getPrototypeOf(parsed)).toBeNull();
    expect(Object.keys(parsed)).toEqual(['__proto__', 'n', 't', 'f', 'z', 's', 'a', 'o']);
    expect(canonicalJson(parsed)).toBe('{"__proto__":{"x":1},"a":[],"f":false,"n":1.5,"o":{},"s":"é","t":true,"z":null}');
    expect(parsed.t).toBe(true);
    expect(parsed.f).toBe(false);
    expect(parsed.z).toBeNull();
    expect(parsed.s).toBe('é');
    expect(parsed.a).toEqual([]);
    expect(Object.getPrototypeOf(parsed.o)).toBeNull();
    expect((parsed.n as { text: string }).text).toBe('1.5');
  });

  it.each(['', '[1,]', '{"a":1,}', '{"a" 1}', '[1 2]', '{"a":1}x', '{', '[', '{1:2}', '{"a":1,2:3}', '[1]]', '{"a":[1}', '{"a":1]'])('answers undefined for %j', (text) => {
    expect(parseJsonExact(text)).toBeUndefined();
  });

  it('parseJsonKeepingDigits answers undefined for text that is not JSON, on both of its paths', () => {
    expect(parseJsonKeepingDigits('{"a":')).toBeUndefined();
    expect(parseJsonKeepingDigits('{"a":12345678901234567890')).toBeUndefined();
    expect(parseJsonKeepingDigits('{"a":1}', { value: { a: 2 } })).toEqual({ value: { a: 2 } });
  });
});

/**
 * `canonicalJson` has three writers that give one text: JSON.stringify's own when
 * `inCanonicalOrder` says its text is already canonical, else the recursive writer, else (what it
 * gives up on) the iterative one. The texts above cannot tell which ran, so a mutant that sends a
 * value down another path survives them; these pin each path's own contract.
 */
describe("canonicalJson's paths", () => {
  const fn = () => 1;
  const symbol = Symbol('s');
  /** `value` inside `depth` arrays; the innermost array is at depth `depth - 1`. */
  const deepArray = (depth: number, value: unknown): unknown => {
    let out = value;
    for (let i = 0; i < depth; i++) out = [out];
    return out;
  };
  const deepObject = (depth: number, value: unknown): unknown => {
    let out = value;
    for (let i = 0; i < depth; i++) out = { a: out };
    return out;
  };

  it('inCanonicalOrder: true for plain JSON values whose keys are in UTF-16 order, at any depth up to 1000', () => {
    for (const value of [
      'a',
      '\ud800',
      '',
      0,
      -1.5,
      true,
      false,
      null,
      [],
      {},
      [1, 'a', [true, null], { a: 1 }],
      // Past ten items: an array's indices are not looked at as keys ("10" sorts before "9").
      Array.from({ length: 12 }, (_, i) => i),
      { a: 1, b: { c: null, d: [] } },
      { '': 1, a: 2 },
      { A: 1, b: 2 },
      { 1: 1, a: 2 },
      { b: 1, '\ud83d\ude00': 2, '\ufb33': 3 },
      { '\ud800': 1, '\udc00': 2 },
      // Inherited members are not JSON.stringify's: only own keys are looked at.
      Object.assign(Object.create({ a: 1 }) as object, { b: 2 }),
      deepArray(1001, 1),
      deepObject(1001, 1),
    ]) {
      expect(inCanonicalOrder(value, 0), canonicalJson(value)).toBe(true);
    }
  });

  it('inCanonicalOrder: false for keys out of order (anywhere), what JSON.stringify treats specially, and past depth 1000', () => {
    for (const value of [
      { b: 1, a: 2 },
      { a: { d: 1, c: 2 } },
      [{ b: 1, a: 2 }],
      [1, [{ b: 1, a: 2 }]],
      { '\ufb33': 1, '\ud83d\ude00': 2 },
      Number.NaN,
      Infinity,
      -Infinity,
      [Number.NaN],
      { a: Infinity },
      1n,
      undefined,
      fn,
      symbol,
      [undefined],
      { a: undefined },
      { a: fn },
      [symbol],
      new Date(0),
      { toJSON: () => 1 },
      [{ toJSON: () => 1 }],
      { a: { toJSON: () => 1 } },
      deepArray(1002, 1),
      deepObject(1002, 1),
    ]) {
      expect(inCanonicalOrder(value, 0), canonicalJson(value)).toBe(false);
    }
  });

  it('the recursive writer writes plain values itself, skipping members as JSON.stringify does, up to depth 1000', () => {
    for (const [value, written] of [
      ['a', '"a"'],
      ['\ud800', '"\\ud800"'],
      [1.5, '1.5'],
      [-0, '0'],
      [true, 'true'],
      [false, 'false'],
      [null, 'null'],
      [[], '[]'],
      [{}, '{}'],
      [{ b: [1, null], a: 'x' }, '{"a":"x","b":[1,null]}'],
      [[undefined, fn, symbol, 1], '[null,null,null,1]'],
      [{ c: undefined, b: fn, a: symbol, d: 1 }, '{"d":1}'],
      [deepArray(1001, 1), '['.repeat(1001) + '1' + ']'.repeat(1001)],
      [deepObject(1001, 1), '{"a":'.repeat(1001) + '1' + '}'.repeat(1001)],
    ] as ReadonlyArray<readonly [unknown, string]>) {
      expect(writeRecursive(value, 0)).toBe(written);
    }
  });

  it('the recursive writer throws for what it leaves to the iterative writer: non-finite numbers, BigInt, toJSON, past depth 1000', () => {
    for (const value of [
      Number.NaN,
      Infinity,
      [-Infinity],
      1n,
      { a: 1n },
      undefined,
      fn,
      symbol,
      new Date(0),
      [{ toJSON: () => 1 }],
      { a: { toJSON: () => 1 } },
      deepArray(1002, 1),
      deepObject(1002, 1),
    ]) {
      expect(() => writeRecursive(value, 0), canonicalJson(value)).toThrow('canonical JSON: left to the iterative writer');
    }
  });

  it('a value already in canonical order is written by one JSON.stringify of the whole of it; any other is not', () => {
    const stringify = vi.spyOn(JSON, 'stringify');
    try {
      const inOrder = { a: [1, { b: 'x', c: null }], d: true };
      expect(canonicalJson(inOrder)).toBe('{"a":[1,{"b":"x","c":null}],"d":true}');
      expect(stringify.mock.calls.filter(([value]) => value === inOrder)).toHaveLength(1);
      const outOfOrder = { d: true, a: [1, { c: null, b: 'x' }] };
      expect(canonicalJson(outOfOrder)).toBe('{"a":[1,{"b":"x","c":null}],"d":true}');
      expect(stringify.mock.calls.some(([value]) => value === outOfOrder)).toBe(false);
    } finally {
      stringify.mockRestore();
    }
  });

  it('canonicalJsonText takes the caller\'s parse when no digits can be lost, and reads the text itself when they can', () => {
    expect(canonicalJsonText('{"a":1}', { value: { a: 2 } })).toBe('{"a":2}');
    expect(canonicalJsonText('{"a":12345678901234567890}', { value: { a: 2 } })).toBe('{"a":12345678901234567890}');
  });
});
