import { describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/core/fingerprint.js';

const enc = (s: string) => new TextEncoder().encode(s);
const fp = (body: string, over: Partial<Parameters<typeof fingerprint>[0]> = {}, fields?: string[]) =>
  fingerprint({ method: 'POST', path: '/charges', contentType: 'application/json', body: enc(body), ...over }, { fields });

describe('fingerprint', () => {
  it('is a SHA-256 hex digest', () => {
    expect(fp('{}')).toMatch(/^[0-9a-f]{64}$/);
  });

  it('canonicalises JSON (RFC 8785): key order, whitespace and number spelling do not matter', () => {
    expect(fp('{"a":1,"b":{"y":2,"x":[1,2]}}')).toBe(fp(' { "b" : { "x":[1, 2], "y":2.0 }, "a":1e0 } '));
    expect(fp('{"a":"\\u00e9"}')).toBe(fp('{"a":"é"}'));
    expect(fp('{"a":1}')).not.toBe(fp('{"a":2}'));
    expect(fp('[1,2]')).not.toBe(fp('[2,1]'));
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
    // A JSON body and a raw body with the same bytes are not confused.
    expect(fp('{"a":1}')).not.toBe(fp('{"a":1}', { contentType: 'text/plain' }));
  });

  it('hashes JSON that RFC 8785 cannot canonicalise (a lone surrogate) as raw bytes instead of failing', () => {
    expect(fp('{"a":"\\ud800"}')).toMatch(/^[0-9a-f]{64}$/);
    expect(fp('{"a":"\\ud800"}')).toBe(fp('{"a":"\\ud800"}'));
    expect(fp('{"a":"\\ud800"}')).not.toBe(fp('{"a":"\\ud801"}'));
    const parsed = (text: string) =>
      fingerprint({ method: 'POST', path: '/x', contentType: 'application/json', body: new Uint8Array(0), parsedJson: { value: JSON.parse(text) } });
    expect(parsed('{"a":"\\ud800"}')).toMatch(/^[0-9a-f]{64}$/);
    expect(parsed('{"a":"\\ud800"}')).not.toBe(parsed('{"a":"\\ud801"}'));
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
  });
});
