/**
 * Fuzzing canonical JSON (src/core/canonical-json.ts) and the fingerprint built on it
 * (src/core/fingerprint.ts). JSON text is rendered from generated values in many spellings (key
 * order, whitespace, escapes, number spellings, repeated keys) and compared: with the `canonicalize`
 * package (the RFC 8785 reference) where both are defined, between idemkit's two readers, and
 * between spellings of one value. Nothing may throw: the body is the client's.
 */
import canonicalize from 'canonicalize';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalJson, canonicalJsonText, canonicalNumber, parseJsonExact, readCanonicalJson } from '../../src/core/canonical-json.js';
import { fingerprint } from '../../src/core/fingerprint.js';
import { anyUtf16, fuzz, FUZZ_TIMEOUT } from './fuzz.js';

// ---- values and their many spellings -------------------------------------------------------------

/** A number by its exact decimal value: (-1)^negative × digits × 10^exponent. */
class Decimal {
  constructor(
    readonly negative: boolean,
    readonly digits: bigint,
    readonly exponent: number,
  ) {}
}
type Value = null | boolean | string | number | Decimal | Value[] | { [key: string]: Value };

/** Keys that sort in surprising ways or mean something to JS objects. */
const KEYS = ['', 'a', 'b', 'A', 'aa', '10', '2', 'é', 'z\u0000', '\u007f', '€', '😀', '\ud83d\ude00x', '\uffff', '__proto__', 'constructor', 'toJSON'];

function valueArbitrary(unit: 'binary' | 'grapheme-ascii', decimals: boolean) {
  const text = unit === 'binary' ? fc.string({ unit: 'binary', maxLength: 8 }) : fc.string({ maxLength: 8 });
  const key = fc.oneof(fc.constantFrom(...KEYS), text);
  const scalar = fc.oneof(
    fc.constant(null),
    fc.boolean(),
    text,
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.integer(),
    ...(decimals
      ? [
          fc
            .tuple(fc.boolean(), fc.bigInt({ min: 0n, max: 10n ** 40n }), fc.oneof(fc.integer({ min: -30, max: 30 }), fc.integer({ min: -400, max: 400 })))
            .map(([negative, digits, exponent]) => new Decimal(negative, digits, exponent)),
        ]
      : []),
  );
  return fc.letrec<{ value: Value }>((tie) => ({
    value: fc.oneof(
      { depthSize: 'small', withCrossShrink: true },
      scalar,
      fc.array(tie('value'), { maxLength: 4 }),
      fc.dictionary(key, tie('value'), { maxKeys: 4 }),
    ),
  })).value;
}

/** Draws from a list of choices, round and round (fast-check shrinks the list). */
function chooser(choices: readonly number[]) {
  let i = 0;
  return (n: number) => (choices.length === 0 ? 0 : choices[i++ % choices.length]! % n);
}
type Choose = ReturnType<typeof chooser>;

const SPACES = ['', '', '', ' ', '\n', '\t', '\r\n  '];

/** One JSON spelling of `value`: any key order, spaces, escapes, number spelling; maybe repeated keys (the last one counts). */
function render(value: Value, choose: Choose, repeatKeys: boolean): string {
  const space = () => SPACES[choose(SPACES.length)]!;
  if (value === null || typeof value === 'boolean') return String(value);
  if (typeof value === 'string') return renderString(value, choose);
  if (typeof value === 'number') return spellDouble(value, choose);
  if (value instanceof Decimal) return spell(value, choose);
  if (Array.isArray(value)) return `[${space()}${value.map((item) => render(item, choose, repeatKeys) + space()).join(`,${space()}`)}]`;
  const keys = Object.keys(value);
  for (let i = keys.length - 1; i > 0; i--) {
    const j = choose(i + 1);
    [keys[i], keys[j]] = [keys[j]!, keys[i]!];
  }
  const members: string[] = [];
  for (const key of keys) {
    // An earlier member with the same key: JSON.parse, and so the canonical form, keep the last.
    if (repeatKeys && choose(4) === 0) members.push(`${renderString(key, choose)}:${space()}${choose(2) ? '"earlier"' : '[1,{"x":2}]'}`);
    members.push(`${renderString(key, choose)}${space()}:${space()}${render(value[key]!, choose, repeatKeys)}`);
  }
  return `{${space()}${members.join(`${space()},${space()}`)}${space()}}`;
}

function renderString(text: string, choose: Choose): string {
  let out = '"';
  for (const c of text) {
    const code = c.charCodeAt(0);
    if (c === '"' || c === '\\') out += `\\${c}`;
    else if (c === '/' && choose(2) === 0) out += '\\/';
    else if (code < 0x20 || choose(8) === 0) {
      const short = { '\n': '\\n', '\t': '\\t', '\r': '\\r', '\b': '\\b', '\f': '\\f' }[c];
      if (short !== undefined && choose(2) === 0) out += short;
      else for (const unit of c.length === 2 ? [c.charCodeAt(0), c.charCodeAt(1)] : [code]) out += `\\u${unit.toString(16).padStart(4, '0')}`.replace(/[a-f]/g, (h) => (choose(2) ? h : h.toUpperCase()));
    } else out += c;
  }
  return out + '"';
}

/** A double by the exact decimal of its shortest text (what a client serialising it sends). */
function decimalOf(n: number): Decimal {
  const [, sign, whole, fraction = '', exponent = '0'] = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(n))!;
  return new Decimal(sign === '-' || Object.is(n, -0), BigInt(whole! + fraction), Number(exponent) - fraction.length);
}

const spellDouble = (n: number, choose: Choose) => spell(decimalOf(n), choose);

/** One JSON spelling of a decimal: point anywhere, trailing zeros, exponent in any form, `-0`. */
function spell(d: Decimal, choose: Choose): string {
  const trailing = choose(3);
  const mantissa = d.digits.toString() + '0'.repeat(trailing);
  const fractionDigits = choose(mantissa.length + 3);
  const padded = mantissa.padStart(fractionDigits + 1, '0');
  let whole = padded.slice(0, padded.length - fractionDigits).replace(/^0+(?=\d)/, '');
  const fraction = padded.slice(padded.length - fractionDigits);
  const exponent = d.exponent - trailing + fractionDigits;
  if (whole === '') whole = '0';
  let text = (d.negative ? '-' : '') + whole + (fraction === '' ? '' : `.${fraction}`);
  if (exponent !== 0 || choose(4) === 0) {
    const sign = exponent < 0 ? '-' : ['', '+'][choose(2)]!;
    text += ['e', 'E'][choose(2)]! + sign + '0'.repeat(choose(3)) + Math.abs(exponent);
  }
  return text;
}

/** The canonical number of a decimal, by ECMAScript's Number::toString rules applied to its own digits. */
function expectedNumber(d: Decimal): string {
  if (d.digits === 0n) return '0';
  let digits = d.digits.toString();
  let exponent = d.exponent;
  while (digits.endsWith('0')) {
    digits = digits.slice(0, -1);
    exponent++;
  }
  const k = digits.length;
  const n = exponent + k;
  const sign = d.negative ? '-' : '';
  if (k <= n && n <= 21) return sign + digits + '0'.repeat(n - k);
  if (0 < n && n <= 21) return sign + digits.slice(0, n) + '.' + digits.slice(n);
  if (-6 < n && n <= 0) return sign + '0.' + '0'.repeat(-n) + digits;
  const e = n - 1;
  return `${sign}${digits[0]}${k > 1 ? '.' + digits.slice(1) : ''}e${e < 0 ? '-' : '+'}${Math.abs(e)}`;
}

const choices = fc.array(fc.nat(), { minLength: 1, maxLength: 64 });
const wellFormedValue = valueArbitrary('binary', false);
const asciiValue = valueArbitrary('grapheme-ascii', false);
const decimalValue = valueArbitrary('grapheme-ascii', true);

/** Valid JSON texts, then damaged: a character inserted, removed or replaced. */
const damagedText = fc
  .tuple(fc.oneof(wellFormedValue, decimalValue), choices, fc.array(fc.tuple(fc.nat(), fc.constantFrom(...'{}[],:"\\ -+.eE0123456789tfn\u0000\ud800'), fc.nat(2)), { minLength: 1, maxLength: 3 }))
  .map(([value, picks, edits]) => {
    let text = render(value, chooser(picks), true);
    for (const [at, c, kind] of edits) {
      const i = at % (text.length + 1);
      text = kind === 0 ? text.slice(0, i) + c + text.slice(i) : kind === 1 ? text.slice(0, i) + text.slice(i + 1) : text.slice(0, i) + c + text.slice(i + 1);
    }
    return text;
  });

// ---- properties ----------------------------------------------------------------------------------

describe('fuzz: canonical JSON', FUZZ_TIMEOUT, () => {
  it('agrees with the canonicalize package (RFC 8785) on every spelling of well-formed JSON of doubles', () => {
    fuzz(
      fc.property(wellFormedValue, choices, fc.boolean(), (value, picks, repeatKeys) => {
        const text = render(value, chooser(picks), repeatKeys);
        const reference = canonicalize(JSON.parse(text));
        expect(canonicalJsonText(text)).toBe(reference);
        expect(readCanonicalJson(text)).toBe(reference);
        expect(canonicalJson(parseJsonExact(text)!.value)).toBe(reference);
      }),
      0.5,
    );
  });

  it('gives every spelling of one value one text: key order, spaces, escapes, number spellings, exact digits', () => {
    fuzz(
      fc.property(decimalValue, choices, choices, (value, a, b) => {
        const one = canonicalJsonText(render(value, chooser(a), false));
        expect(one).toBeDefined();
        expect(canonicalJsonText(render(value, chooser(b), true))).toBe(one);
        expect(canonicalJsonText(one!)).toBe(one); // canonical text is its own canonical form
      }),
    );
  });

  it('writes a number as its exact decimal value in ECMAScript form, whatever its spelling', () => {
    fuzz(
      fc.property(
        fc.oneof(
          fc.double({ noNaN: true, noDefaultInfinity: true }).map(decimalOf),
          fc.tuple(fc.boolean(), fc.bigInt({ min: 0n, max: 10n ** 60n }), fc.integer({ min: -1000, max: 1000 })).map(([s, d, e]) => new Decimal(s, d, e)),
        ),
        choices,
        (d, picks) => {
          const token = spell(d, chooser(picks));
          expect(canonicalNumber(token)).toBe(expectedNumber(d));
        },
      ),
    );
  });

  it('writes exponents beyond a double (16+ digits) exactly, in exponent form', () => {
    fuzz(
      fc.property(
        fc.boolean(),
        fc.stringMatching(/^\d{1,30}$/),
        fc.stringMatching(/^\d{0,10}$/),
        fc.boolean(),
        fc.bigInt({ min: 10n ** 15n, max: 10n ** 30n }),
        (negative, whole, fraction, negativeExponent, exponent) => {
          const token = `${negative ? '-' : ''}${whole.replace(/^0+(?=\d)/, '')}${fraction ? `.${fraction}` : ''}e${negativeExponent ? '-' : '+'}${exponent}`;
          const digits = (whole + fraction).replace(/^0+/, '');
          if (digits.replace(/0+$/, '') === '') return void expect(canonicalNumber(token)).toBe('0');
          // value = 0.<significant digits> × 10^point, point computed with BigInt.
          const leadingZeros = (whole + fraction).length - digits.length;
          const significant = digits.replace(/0+$/, '');
          const point = (negativeExponent ? -exponent : exponent) + BigInt(whole.replace(/^0+(?=\d)/, '').length) - BigInt(leadingZeros - (whole.length - whole.replace(/^0+(?=\d)/, '').length));
          const e = point - 1n;
          const mantissa = significant.length > 1 ? `${significant[0]}.${significant.slice(1)}` : significant;
          expect(canonicalNumber(token)).toBe(`${negative ? '-' : ''}${mantissa}e${e < 0n ? '-' : '+'}${e < 0n ? -e : e}`);
        },
      ),
    );
  });

  it('writes a double exactly as ECMAScript (and so RFC 8785) writes it', () => {
    fuzz(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), choices, (n, picks) => {
        expect(canonicalNumber(spellDouble(n, chooser(picks)))).toBe(JSON.stringify(n));
      }),
    );
  });

  it('reads damaged and arbitrary text as JSON.parse does (undefined exactly when it throws), never throwing', () => {
    fuzz(
      fc.property(fc.oneof(damagedText, anyUtf16({ maxLength: 40 })), (text) => {
        let parsed: { value: unknown } | undefined;
        try {
          parsed = { value: JSON.parse(text) };
        } catch {
          parsed = undefined;
        }
        const canonical = canonicalJsonText(text);
        expect(canonical === undefined).toBe(parsed === undefined);
        expect(readCanonicalJson(text)).toBe(canonical);
        expect(parseJsonExact(text) === undefined).toBe(parsed === undefined);
        // Where the text has no number beyond a double's digits, the writer over JSON.parse's value agrees.
        if (parsed !== undefined && !/\d{16}|[eE][+-]?\d{3}/.test(text.replace(/\./g, ''))) expect(canonicalJson(parsed.value)).toBe(canonical);
      }),
    );
  });

  it('escapes lone surrogates as JSON.stringify does, in both readers and the writer', () => {
    const lonely = fc.oneof(fc.constant('\ud800'), fc.constant('\udfff'), fc.constant('\\udc00'), fc.constant('\\uD83D'), fc.string({ unit: fc.constantFrom('a', 'é', '😀', ' '), maxLength: 3 }));
    fuzz(
      fc.property(fc.array(fc.tuple(lonely, lonely), { minLength: 1, maxLength: 4 }), (pairs) => {
        const text = `{${pairs.map(([k, v], i) => `"${k}${i}":"${v}"`).join(',')}}`;
        const parsed = JSON.parse(text) as unknown;
        const canonical = canonicalJsonText(text);
        expect(canonical).toBe(canonicalJson(parsed));
        expect(readCanonicalJson(text)).toBe(canonical);
        expect(canonical!.isWellFormed()).toBe(true); // ASCII escapes, never a raw lone surrogate
      }),
    );
  });

  it('reads and writes any depth without recursion (no RangeError), in both readers and the writer', () => {
    fuzz(
      fc.property(fc.oneof(fc.integer({ min: 1, max: 2_000 }), fc.integer({ min: 2_000, max: 20_000 })), fc.array(fc.boolean(), { minLength: 1, maxLength: 8 }), fc.constantFrom('1', '12345678901234567890', '"x"', '[]', '{}'), (depth, kinds, leaf) => {
        const kind = (i: number) => kinds[i % kinds.length]!;
        let open = '';
        let close = '';
        for (let i = 0; i < depth; i++) {
          open += kind(i) ? '{"k" : ' : '[ ';
          close = (kind(i) ? '}' : ']') + close;
        }
        const text = open + leaf + close;
        const expected = text.replace(/ /g, '').replace(/12345678901234567890/, '12345678901234567890');
        expect(canonicalJsonText(text)).toBe(expected);
        expect(readCanonicalJson(text)).toBe(expected);
        expect(canonicalJson(parseJsonExact(text)!.value)).toBe(expected);
        const body = new TextEncoder().encode(text);
        expect(fingerprint({ method: 'POST', path: '/', contentType: 'application/json', body })).toBe(
          fingerprint({ method: 'POST', path: '/', contentType: 'application/json', body: new TextEncoder().encode(expected) }),
        );
        expect(fingerprint({ method: 'POST', path: '/', contentType: 'application/json', body }, { fields: ['k.k.k'] })).toMatch(/^v2:/);
      }),
      0.01,
      10,
    );
  });

  it('writes any JS value a parser or a caller might hand it (cycles, BigInt, toJSON, getters that throw), never throwing', () => {
    const hostile = fc.anything({
      withBigInt: true,
      withBoxedValues: true,
      withDate: true,
      withMap: true,
      withSet: true,
      withNullPrototype: true,
      withObjectString: true,
      withSparseArray: true,
      withTypedArray: true,
      withUnicodeString: true,
      maxDepth: 4,
    });
    fuzz(
      fc.property(hostile, fc.nat(3), (value, twist) => {
        let input: unknown = value;
        if (twist === 1 && value !== null && typeof value === 'object') {
          (value as Record<string, unknown>).self = value; // a cycle
        } else if (twist === 2) {
          input = { value, get bad(): never { throw new RangeError('getter'); }, toJSONLater: { toJSON: () => { throw new TypeError('toJSON'); } } };
        } else if (twist === 3) {
          input = new Proxy({ value }, { ownKeys: () => { throw new Error('ownKeys'); } });
        }
        expect(typeof canonicalJson(input)).toBe('string');
      }),
      0.3,
    );
  });
});

describe('fuzz: fingerprint', FUZZ_TIMEOUT, () => {
  const jsonTypes = fc.constantFrom('application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON', 'application/problem+json', 'application/vnd.api+json ; x=1');

  it('is a function of the canonical form only: equal exactly when the canonical texts are', () => {
    fuzz(
      fc.property(fc.oneof(asciiValue, decimalValue), fc.oneof(asciiValue, decimalValue), choices, choices, jsonTypes, jsonTypes, fc.boolean(), (v1, v2, a, b, type1, type2, same) => {
        const first = render(v1, chooser(a), true);
        const second = render(same ? v1 : v2, chooser(b), true);
        const fp = (text: string, contentType: string, parsed: boolean) =>
          fingerprint({ method: 'post', path: '/orders?x=1', contentType, body: new TextEncoder().encode(text), ...(parsed ? { parsedJson: { value: JSON.parse(text) } } : {}) });
        // The media type is part of the fingerprint; its parameters and case are not.
        const essence = (type: string) => type.split(';')[0]!.trim().toLowerCase();
        const equalCanonical = canonicalJsonText(first) === canonicalJsonText(second) && essence(type1) === essence(type2);
        expect(fp(first, type1, false) === fp(second, type2, true)).toBe(equalCanonical);
        expect(fp(first, type1, true)).toBe(fp(first, type1, false));
      }),
    );
  });

  it('fingerprints any bytes, content type, fields and parsed value without throwing', () => {
    fuzz(
      fc.property(
        fc.oneof(fc.uint8Array({ maxLength: 200 }), damagedText.map((text) => new TextEncoder().encode(text))),
        fc.option(fc.oneof(jsonTypes, anyUtf16({ maxLength: 30 })), { nil: undefined }),
        fc.option(fc.array(fc.oneof(fc.constantFrom('a', 'a.b', '__proto__', 'constructor.name', '', '.'), anyUtf16({ maxLength: 8 })), { maxLength: 3 }), { nil: undefined }),
        fc.option(fc.anything({ withBigInt: true, withMap: true, withNullPrototype: true, maxDepth: 3 }), { nil: undefined }),
        fc.boolean(),
        (body, contentType, fields, parsed, emptyBody) => {
          const input = { method: 'POST', path: '/', contentType, body: emptyBody ? new Uint8Array(0) : body, ...(parsed !== undefined ? { parsedJson: { value: parsed } } : {}) };
          // With fields, the form names them by a digest (v2:<digest>:<hex>).
          expect(fingerprint(input, fields ? { fields } : {})).toMatch(fields ? /^v2:[0-9a-f]{16}:[0-9a-f]{64}$/ : /^v2:[0-9a-f]{64}$/);
        },
      ),
    );
  });
});
