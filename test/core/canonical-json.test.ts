import canonicalize from 'canonicalize';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/core/canonical-json.js';

/** A small seeded PRNG, so a failing case can be replayed. */
function prng(seed: number) {
  return () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
}

const STRINGS = ['', 'a', 'é', '€', '😀', '\u0000', '\u001f', '"', '\\', '\u2028', 'Z', 'aa', '\ud83d\ude00x', '10', 'b'];
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

describe('canonicalJson (RFC 8785)', () => {
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

  it('refuses what RFC 8785 has no form for, so the fingerprint falls back to raw bytes', () => {
    expect(() => canonicalJson({ a: '\ud800' })).toThrow(/lone surrogate/);
    expect(() => canonicalJson({ ['\udc00']: 1 })).toThrow(/lone surrogate/);
    expect(() => canonicalJson([Infinity])).toThrow(/Infinity/);
    expect(() => canonicalJson(Number.NaN)).toThrow(/NaN/);
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(() => canonicalJson(circular)).toThrow(/deep|circular/);
  });

  it('skips undefined members and writes undefined array items as null, like JSON.stringify', () => {
    expect(canonicalJson({ b: undefined, a: [undefined, 1] })).toBe('{"a":[null,1]}');
  });
});
