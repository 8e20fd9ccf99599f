import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { FingerprintInput } from '../../src/core/fingerprint.js';
import { fieldsDigest, fingerprint, fingerprintForm, mediaTypeField } from '../../src/core/fingerprint.js';

const enc = (s: string) => new TextEncoder().encode(s);
const fp = (body: string, over: Partial<FingerprintInput> = {}, fields?: string[]) =>
  fingerprint({ method: 'POST', path: '/charges', contentType: 'application/json', body: enc(body), ...over }, { fields });
/** The fingerprint of a body a framework parsed, its bytes gone (Fastify, Express after express.json()). */
const parsed = (value: unknown, contentType: string | null = 'application/json', fields?: string[]) =>
  fingerprint({ method: 'POST', path: '/charges', contentType, body: new Uint8Array(0), parsedJson: { value } }, { fields });
/** The fingerprint of a body the adapter read and parsed (Express reading it itself): bytes and value. */
const both = (text: string) =>
  fingerprint({ method: 'POST', path: '/charges', contentType: 'application/json', body: enc(text), parsedJson: { value: JSON.parse(text) as unknown } });

describe('fingerprint', () => {
  it('is v2: and a SHA-256 hex digest', () => {
    expect(fp('{}')).toMatch(/^v2:[0-9a-f]{64}$/);
    expect(fp('hello', { contentType: 'text/plain' })).toMatch(/^v2:[0-9a-f]{64}$/);
    expect(parsed({ a: 1 })).toMatch(/^v2:[0-9a-f]{64}$/);
  });

  it('canonicalises JSON (RFC 8785): key order, whitespace and number spelling do not matter', () => {
    expect(fp('{"a":1,"b":{"y":2,"x":[1,2]}}')).toBe(fp(' { "b" : { "x":[1, 2], "y":2.0 }, "a":1e0 } '));
    expect(fp('{"a":"\\u00e9"}')).toBe(fp('{"a":"é"}'));
    expect(fp('{"a":1}')).not.toBe(fp('{"a":2}'));
    expect(fp('[1,2]')).not.toBe(fp('[2,1]'));
    // The same body as bytes, as a parsed value, and as both, is one request.
    const text = '{"b":[1,2.50],"a":{"y":null,"x":"é"}}';
    expect(parsed(JSON.parse(text))).toBe(fp(text));
    expect(both(text)).toBe(fp(text));
  });

  it('recognises +json media types', () => {
    expect(fp('{"a":1,"b":2}', { contentType: 'application/merge-patch+json' })).toBe(
      fp('{"b":2,"a":1}', { contentType: 'application/merge-patch+json' }),
    );
  });

  it('hashes non-JSON media types and invalid JSON as raw bytes', () => {
    expect(fp('{"a":1,"b":2}', { contentType: 'text/plain' })).not.toBe(fp('{"b":2,"a":1}', { contentType: 'text/plain' }));
    expect(fp('{"a":', {})).not.toBe(fp('{"a": ', {}));
    expect(fp('{"a":', {})).toBe(fp('{"a":', {}));
    expect(fp('{"a":1}')).not.toBe(fp('{"a":1}', { contentType: 'text/plain' }));
    // Not UTF-8: raw bytes too.
    const latin1 = fingerprint({ method: 'POST', path: '/x', contentType: 'application/json', body: new Uint8Array([0x22, 0xe9, 0x22]) });
    expect(latin1).toMatch(/^v2:[0-9a-f]{64}$/);
  });

  it('includes the media type: one body under two media types is two requests (issue 14, item 11b)', () => {
    expect(fp('{"a":1}', { contentType: 'application/merge-patch+json' })).not.toBe(fp('{"a":1}'));
    // Invalid JSON sent as JSON, and the same bytes as text: both raw, still two requests.
    expect(fp('{"not json', { contentType: 'text/plain' })).not.toBe(fp('{"not json', { contentType: 'application/json' }));
    // A missing Content-Type is a media type of its own, and so is an empty one.
    const types = [undefined, null, '', 'text/plain', 'application/octet-stream', 'application/json'];
    const prints = types.map((contentType) => fp('{"not json', { contentType }));
    expect(new Set(prints).size).toBe(5); // undefined and null are both "none"
    expect(prints[0]).toBe(prints[1]);
    // Only the essence counts: parameters, case and spaces do not.
    expect(fp('{"a":1}', { contentType: 'Application/JSON; charset=utf-8' })).toBe(fp('{"a":1}'));
    expect(fp('x', { contentType: 'text/plain;charset=utf-8' })).toBe(fp('x', { contentType: ' TEXT/PLAIN ; format=flowed' }));
    // The parsed path too.
    expect(parsed({ a: 1 }, 'application/merge-patch+json')).not.toBe(parsed({ a: 1 }));
    expect(parsed({ a: 1 }, 'application/x-www-form-urlencoded')).not.toBe(parsed({ a: 1 }, null));
  });

  it('writes the media type as its lowercased essence, or null when absent', () => {
    expect(mediaTypeField('application/json')).toBe('"application/json"');
    expect(mediaTypeField('Application/Merge-Patch+JSON; charset=UTF-8')).toBe('"application/merge-patch+json"');
    expect(mediaTypeField(undefined)).toBe('null');
    expect(mediaTypeField(null)).toBe('null');
    expect(mediaTypeField('')).toBe('""');
    // The one-entry cache answers for the header it was given, not the one before.
    expect(mediaTypeField('text/plain')).toBe('"text/plain"');
    expect(mediaTypeField('text/html')).toBe('"text/html"');
  });

  it('keeps numbers beyond a double apart, by their exact digits (issue 14, item 11a)', () => {
    expect(fp('{"amount":9007199254740993}')).not.toBe(fp('{"amount":9007199254740992}'));
    expect(fp('{"amount":0.10000000000000001}')).not.toBe(fp('{"amount":0.1}'));
    expect(fp('{"amount":1e400}')).not.toBe(fp('{"amount":1e401}'));
    // Also when the adapter offers its parsed value, which cannot tell them apart.
    expect(both('{"amount":9007199254740993}')).not.toBe(both('{"amount":9007199254740992}'));
    expect(both('{"amount":9007199254740993}')).toBe(fp('{"amount":9007199254740993}'));
    // Spellings of one value are one request; -0 is 0 (RFC 8785).
    for (const spelling of ['1.0', '1e0', '10e-1', '0.1e1', '1E+0']) expect(fp(`{"amount":${spelling}}`), spelling).toBe(fp('{"amount":1}'));
    expect(fp('[-0]')).toBe(fp('[0]'));
    expect(fp('{"amount":9007199254740993.0}')).toBe(fp('{"amount":9007199254740993}'));
  });

  it('never throws: deep JSON, BigInt and other values a parser may produce (issue 14, item 10)', () => {
    for (const depth of [6000, 100_000, 1001]) {
      const text = '['.repeat(depth) + ']'.repeat(depth);
      // Before: RangeError (Maximum call stack size exceeded) from JSON.stringify past ~5,000 levels.
      expect(() => parsed(JSON.parse(text))).not.toThrow();
      expect(fp(text)).toMatch(/^v2:[0-9a-f]{64}$/);
      expect(parsed(JSON.parse(text))).toBe(fp(text));
      expect(both(text)).toBe(fp(text));
      // Non-JSON media types with a parsed value (a form parser, say) too.
      expect(parsed(JSON.parse(text), 'application/x-www-form-urlencoded')).toMatch(/^v2:[0-9a-f]{64}$/);
      expect(fp(text)).not.toBe(fp('['.repeat(depth + 1) + ']'.repeat(depth + 1)));
    }
    // BigInt from a custom JSON parser: 1n and 1 are different requests. Before: TypeError.
    expect(() => parsed({ amount: 1n })).not.toThrow();
    expect(parsed({ amount: 1n })).not.toBe(parsed({ amount: 1 }));
    expect(parsed({ amount: 9007199254740993n })).not.toBe(parsed({ amount: 9007199254740992n }));
    expect(parsed({ amount: 1n }, 'application/x-www-form-urlencoded')).not.toBe(parsed({ amount: 1 }, 'application/x-www-form-urlencoded'));
    const circular: Record<string, unknown> = { a: 1 };
    circular.self = circular;
    for (const value of [circular, Number.NaN, Symbol('x'), undefined, () => 1, new Map([[1, 2]]), { a: '\ud800' }]) {
      expect(parsed(value)).toMatch(/^v2:[0-9a-f]{64}$/);
      expect(parsed(value, 'text/plain')).toMatch(/^v2:[0-9a-f]{64}$/);
    }
  });

  it('hashes JSON that is not UTF-8 as its raw bytes: two bodies differing only in invalid bytes are two requests (issue 26, item 24)', () => {
    // A lenient decoder turns both 0xff and 0xfe into U+FFFD: the two would parse to one value and share a fingerprint.
    const invalid = (byte: number) => new Uint8Array([...enc('{"amount":1,"note":"'), byte, ...enc('"}')]);
    const print = (body: Uint8Array, fields?: string[]) => fingerprint({ method: 'POST', path: '/charges', contentType: 'application/json', body }, { fields });
    expect(print(invalid(0xff))).toMatch(/^v2:[0-9a-f]{64}$/);
    expect(print(invalid(0xff))).not.toBe(print(invalid(0xfe)));
    expect(print(invalid(0xff))).toBe(print(invalid(0xff)));
    // Nor the valid replacement character itself, which a lenient decoder would make of either.
    expect(print(invalid(0xff))).not.toBe(fp('{"amount":1,"note":"\ufffd"}'));
    // Raw bytes: whitespace counts, as for any body that is not UTF-8 JSON.
    expect(print(invalid(0xff))).not.toBe(print(new Uint8Array([...enc('{ "amount":1,"note":"'), 0xff, ...enc('"}')])));
    // With fingerprintFields too: the invalid bytes sit in a field that is not chosen, and still count.
    expect(print(invalid(0xff), ['amount'])).not.toBe(print(invalid(0xfe), ['amount']));
    // An adapter that parsed the body leniently (Express's json parser makes U+FFFD of bad bytes)
    // hands over bytes and value: the bytes decide, the value must not stand in for them.
    const withParsed = (body: Uint8Array, fields?: string[]) =>
      fingerprint({ method: 'POST', path: '/charges', contentType: 'application/json', body, parsedJson: { value: JSON.parse(new TextDecoder().decode(body)) as unknown } }, { fields });
    expect(withParsed(invalid(0xff))).not.toBe(withParsed(invalid(0xfe)));
    expect(withParsed(invalid(0xff))).toBe(print(invalid(0xff)));
    expect(withParsed(invalid(0xff), ['amount'])).not.toBe(withParsed(invalid(0xfe), ['amount']));
    expect(withParsed(invalid(0xff), ['amount'])).toBe(print(invalid(0xff), ['amount']));
  });

  it('selected fields are one set: the order they are listed in does not matter (issue 26, item 24)', () => {
    const body = '{"amount":1,"customer":{"id":"c1"},"currency":"eur"}';
    const prints = [
      ['amount', 'currency', 'customer.id'],
      ['customer.id', 'amount', 'currency'],
      ['currency', 'customer.id', 'amount'],
    ].map((fields) => fp(body, {}, fields));
    expect(new Set(prints).size).toBe(1);
    expect(parsed(JSON.parse(body), 'application/json', ['currency', 'amount'])).toBe(parsed(JSON.parse(body), 'application/json', ['amount', 'currency']));
    expect(parsed(JSON.parse(body), 'application/json', ['currency', 'amount'])).toBe(fp(body, {}, ['amount', 'currency']));
    // Still the values that count: another value in a listed field is another request.
    expect(fp(body, {}, ['currency', 'amount'])).not.toBe(fp('{"amount":1,"currency":"usd"}', {}, ['amount', 'currency']));
  });

  it('hashes JSON with a lone surrogate canonically, each surrogate apart', () => {
    expect(fp('{"a":"\\ud800"}')).toMatch(/^v2:[0-9a-f]{64}$/);
    expect(fp('{"a":"\\ud800"}')).toBe(fp('{ "a" : "\\uD800" }'));
    expect(fp('{"a":"\\ud800"}')).not.toBe(fp('{"a":"\\ud801"}'));
    expect(parsed(JSON.parse('{"a":"\\ud800"}'))).toBe(fp('{"a":"\\ud800"}'));
    expect(parsed(JSON.parse('{"a":"\\ud800"}'))).not.toBe(parsed(JSON.parse('{"a":"\\ud801"}')));
  });

  it('includes the method and the path with its query string', () => {
    expect(fp('{}')).not.toBe(fp('{}', { method: 'PATCH' }));
    expect(fp('{}')).not.toBe(fp('{}', { path: '/charges?x=1' }));
    expect(fp('{}', { method: 'post' })).toBe(fp('{}'));
  });

  it('selects fields when asked, telling a missing field from a null one', () => {
    const fields = ['amount', 'customer.id'];
    expect(fp('{"amount":1,"customer":{"id":"c1"},"ts":1}', {}, fields)).toBe(
      fp('{"ts":2,"customer":{"id":"c1","name":"x"},"amount":1}', {}, fields),
    );
    expect(fp('{"amount":1}', {}, fields)).not.toBe(fp('{"amount":1,"customer":{"id":null}}', {}, fields));
    expect(fp('{"amount":1}', {}, fields)).not.toBe(fp('{"amount":2}', {}, fields));
    // Exact digits in a chosen field, and inherited names are not fields.
    expect(fp('{"amount":9007199254740993,"ts":1}', {}, fields)).not.toBe(fp('{"amount":9007199254740992,"ts":1}', {}, fields));
    expect(fp('{"amount":9007199254740993,"ts":1}', {}, fields)).toBe(fp('{"ts":2,"amount":9007199254740993.00}', {}, fields));
    expect(fp('{}', {}, ['constructor'])).not.toBe(fp('{"constructor":null}', {}, ['constructor']));
    expect(parsed({}, 'application/json', ['constructor'])).not.toBe(parsed({ constructor: null }, 'application/json', ['constructor']));
  });
});

/**
 * The exact input the hash is taken over, written out here from the form docs/semantics.md
 * documents, so that a change to any part of it (the method's case, the media type, the `json`/
 * `raw`/`value` tag, the path taken for a parsed value) is a failing test rather than a quiet
 * change of every stored fingerprint (issue 26, item 27: mutants in these lines survived).
 */
describe('fingerprint: the exact form hashed', () => {
  const sha = (text: string | Uint8Array) => createHash('sha256').update(text).digest('hex');
  const input = (over: Partial<FingerprintInput>): FingerprintInput => ({ method: 'post', path: '/charges?x=1', contentType: 'application/json; charset=utf-8', body: enc('{"b":1,"a":2}'), ...over });

  it('JSON bytes: the method upper-cased, the path, the media type essence, `json`, the canonical text', () => {
    expect(fingerprint(input({}))).toBe(`v2:${sha('POST\n/charges?x=1\n"application/json"\njson\n{"a":2,"b":1}')}`);
  });

  it('other bytes: `raw` and the bytes; no Content-Type is `null`', () => {
    expect(fingerprint(input({ contentType: 'Text/Plain; charset=x', body: enc('{"b":1}') }))).toBe(`v2:${sha('POST\n/charges?x=1\n"text/plain"\nraw\n{"b":1}')}`);
    expect(fingerprint(input({ contentType: undefined, body: enc('abc') }))).toBe(`v2:${sha('POST\n/charges?x=1\nnull\nraw\nabc')}`);
    expect(fingerprint(input({ contentType: null, body: enc('abc') }))).toBe(`v2:${sha('POST\n/charges?x=1\nnull\nraw\nabc')}`);
  });

  it('a parsed value, its bytes gone: `json` under a JSON media type, else `raw` for text and bytes, `value` for the rest', () => {
    const gone = new Uint8Array(0);
    expect(fingerprint(input({ body: gone, parsedJson: { value: { b: 1, a: 2 } } }))).toBe(`v2:${sha('POST\n/charges?x=1\n"application/json"\njson\n{"a":2,"b":1}')}`);
    expect(fingerprint(input({ contentType: 'text/plain', body: gone, parsedJson: { value: 'hello' } }))).toBe(`v2:${sha('POST\n/charges?x=1\n"text/plain"\nraw\nhello')}`);
    expect(fingerprint(input({ contentType: 'application/octet-stream', body: gone, parsedJson: { value: enc('hi') } }))).toBe(
      `v2:${sha('POST\n/charges?x=1\n"application/octet-stream"\nraw\nhi')}`,
    );
    expect(fingerprint(input({ contentType: 'application/x-www-form-urlencoded', body: gone, parsedJson: { value: { b: '1', a: '2' } } }))).toBe(
      `v2:${sha('POST\n/charges?x=1\n"application/x-www-form-urlencoded"\nvalue\n{"a":"2","b":"1"}')}`,
    );
    // An empty body with nothing parsed is an empty raw body, also under a JSON media type.
    expect(fingerprint(input({ body: gone }))).toBe(`v2:${sha('POST\n/charges?x=1\n"application/json"\nraw\n')}`);
  });

  it('with fields: the digest of the sorted list between the version and the hash', () => {
    const digest = sha(JSON.stringify(['amount', 'currency'])).slice(0, 16);
    expect(fieldsDigest(['currency', 'amount'])).toBe(digest);
    expect(fingerprint(input({}), { fields: ['currency', 'amount'] })).toMatch(new RegExp(`^v2:${digest}:[0-9a-f]{64}$`));
  });

  it('fingerprintForm reads both forms back and nothing else', () => {
    const hex = 'ab'.repeat(32);
    expect(fingerprintForm(`v2:${hex}`)).toEqual({ fieldsDigest: undefined, hex });
    expect(fingerprintForm(`v2:0123456789abcdef:${hex}`)).toEqual({ fieldsDigest: '0123456789abcdef', hex });
    for (const other of [hex, `v1:${hex}`, `v2:${hex}x`, `v2:0123:${hex}`, `v2:${hex.toUpperCase()}`, '']) expect(fingerprintForm(other)).toBeUndefined();
  });
});
