import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InvalidKeyError } from '../../src/core/errors.js';
import { parseIdempotencyKey } from '../../src/core/key.js';

describe('parseIdempotencyKey', () => {
  it('accepts the draft-07 sf-string and the bare form as the same key', () => {
    expect(parseIdempotencyKey('"8e03978e-40d5-43e8-bc93-6894a57f9324"')).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
    expect(parseIdempotencyKey('8e03978e-40d5-43e8-bc93-6894a57f9324')).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
    expect(parseIdempotencyKey('  abc  ')).toBe('abc');
  });

  it('unescapes sf-strings and ignores parameters', () => {
    expect(parseIdempotencyKey('"a\\"b\\\\c"')).toBe('a"b\\c');
    expect(parseIdempotencyKey('"with space"')).toBe('with space');
    expect(parseIdempotencyKey('"abc";v=1')).toBe('abc');
  });

  it('returns undefined when absent', () => {
    expect(parseIdempotencyKey(undefined)).toBeUndefined();
    expect(parseIdempotencyKey(null)).toBeUndefined();
    expect(parseIdempotencyKey([])).toBeUndefined();
  });

  it.each([
    ['', /empty/],
    ['""', /empty/],
    ['"abc', /structured-field/],
    ['"a"b"', /structured-field/],
    ['"a\\qb"', /structured-field/],
    ['"a\u0001b"', /control/],
    ['a\u0000b', /control/],
    ['clé', /non-ASCII/],
    ['"clé"', /non-ASCII/],
    ['a b', /visible ASCII/],
    ['a"b', /visible ASCII/],
    ['a, b', /comma/],
    ['"a", "b"', /repeated/],
    ['k'.repeat(256), /255/],
    [`"${'k'.repeat(256)}"`, /255/],
  ])('rejects %j', (value, reason) => {
    expect(() => parseIdempotencyKey(value)).toThrow(InvalidKeyError);
    expect(() => parseIdempotencyKey(value)).toThrow(reason);
  });

  it('rejects a repeated header', () => {
    expect(() => parseIdempotencyKey(['a', 'b'])).toThrow(/repeated/);
  });

  it('accepts 255 characters', () => {
    expect(parseIdempotencyKey('k'.repeat(255))).toHaveLength(255);
  });

  it('applies the key policy', () => {
    expect(() => parseIdempotencyKey('short', 'Idempotency-Key', { minLength: 16 })).toThrow(/shorter than 16/);
    expect(parseIdempotencyKey('8e03978e-40d5-43e8-bc93-6894a57f9324', 'Idempotency-Key', { format: 'uuid' })).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
    expect(() => parseIdempotencyKey('not-a-uuid', 'Idempotency-Key', { format: 'uuid' })).toThrow(/UUID/);
    expect(parseIdempotencyKey('01ARZ3NDEKTSV4RRFFQ69G5FAV', 'Idempotency-Key', { format: 'ulid' })).toBe('01ARZ3NDEKTSV4RRFFQ69G5FAV');
    expect(() => parseIdempotencyKey('01ARZ3NDEKTSV4RRFFQ69G5FAU!', 'Idempotency-Key', { format: 'ulid' })).toThrow(/ULID/);
  });

  it('minLength: a key of exactly minLength is accepted, one character less is refused (issue 26, item 23)', () => {
    const policy = { minLength: 16 };
    expect(parseIdempotencyKey('k'.repeat(16), 'Idempotency-Key', policy)).toBe('k'.repeat(16));
    expect(parseIdempotencyKey(`"${'k'.repeat(16)}"`, 'Idempotency-Key', policy)).toBe('k'.repeat(16));
    expect(parseIdempotencyKey('k'.repeat(255), 'Idempotency-Key', policy)).toBe('k'.repeat(255));
    expect(() => parseIdempotencyKey('k'.repeat(15), 'Idempotency-Key', policy)).toThrow(/shorter than 16/);
    // The length is the key's, not the header's: quotes and surrounding spaces do not count.
    expect(() => parseIdempotencyKey(`"${'k'.repeat(15)}"`, 'Idempotency-Key', policy)).toThrow(/shorter than 16/);
    expect(() => parseIdempotencyKey(`  ${'k'.repeat(15)}  `, 'Idempotency-Key', policy)).toThrow(/shorter than 16/);
    // Together with a format, both apply.
    expect(parseIdempotencyKey('8e03978e-40d5-43e8-bc93-6894a57f9324', 'Idempotency-Key', { minLength: 36, format: 'uuid' })).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
    expect(() => parseIdempotencyKey('8e03978e-40d5-43e8-bc93-6894a57f9324', 'Idempotency-Key', { minLength: 37, format: 'uuid' })).toThrow(/shorter than 37/);
  });

  const UUID = '8e03978e-40d5-43e8-bc93-6894a57f9324';
  const ULID = '01ARZ3NDEKTSV4RRFFQ69G5FAV';
  // Each holds a valid id whole, so only the anchors refuse them: text before, text after, both.
  it.each([
    ['uuid', `x${UUID}`],
    ['uuid', `0${UUID}`],
    ['uuid', `${UUID}x`],
    ['uuid', `${UUID}0`],
    ['uuid', `order-${UUID}-retry`],
    ['uuid', `"${UUID} "`],
    ['ulid', `x${ULID}`],
    ['ulid', `7${ULID}`],
    ['ulid', `${ULID}x`],
    ['ulid', `${ULID}0`],
    ['ulid', `order-${ULID}-retry`],
  ] as const)('format %s refuses text around a valid id: %j (issue 26, item 23)', (format, value) => {
    expect(() => parseIdempotencyKey(value, 'Idempotency-Key', { format })).toThrow(format === 'uuid' ? /must be a UUID/ : /must be a ULID/);
  });

  it('names the header and carries a problem body with a stable type', () => {
    try {
      parseIdempotencyKey('', 'X-Idem');
      expect.unreachable();
    } catch (error) {
      const e = error as InvalidKeyError;
      expect(e.code).toBe('ERR_IDEMKIT_KEY_INVALID');
      expect(e.problem()).toMatchObject({ type: 'urn:idemkit:problem:invalid-key', status: 400 });
      expect(e.message).toContain('X-Idem');
    }
  });

  it('only SP and HTAB around the value are dropped: not line breaks, NBSP or BOM', () => {
    expect(parseIdempotencyKey('\t abc \t')).toBe('abc');
    expect(parseIdempotencyKey(' \t"a b"\t ')).toBe('a b');
    expect(parseIdempotencyKey(['  k  '])).toBe('k');
    for (const around of ['\n', '\r', '\u00a0', '\ufeff', '\v']) expect(() => parseIdempotencyKey(`${around}abc`), JSON.stringify(around)).toThrow(InvalidKeyError);
    expect(() => parseIdempotencyKey(' \t ')).toThrow(/empty/);
  });

  it('a bare key is taken as the draft rules say, by the one-pass check as by the full checks (property)', () => {
    // The rules as the full checks write them: the one-pass path for plain keys must agree.
    const reference = (value: string): string => {
      const raw = value.replace(/^[ \t]+|[ \t]+$/g, '');
      if (raw.length === 0 || raw.length > 255 || !/^[\x21\x23-\x2b\x2d-\x5b\x5d-\x7e]+$/.test(raw)) return 'refused';
      return raw;
    };
    const chars = fc.constantFrom(...'aZ09-_.~!#$%&\'*+/:;<=>?@[]^`{|} \t",\\\u00e9\u0000\u007f\n');
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: chars, maxLength: 40 }), fc.string({ unit: fc.constantFrom('k', ' ', '\t'), minLength: 250, maxLength: 262 })), (value) => {
        if (value.replace(/^[ \t]+/, '').startsWith('"')) return; // the sf-string form: its own parser
        let got: string;
        try {
          got = parseIdempotencyKey(value)!;
        } catch (error) {
          expect(error).toBeInstanceOf(InvalidKeyError);
          got = 'refused';
        }
        expect(got).toBe(reference(value));
      }),
      { numRuns: 2000 },
    );
  });
});
