import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { jsonPairs, jsonString } from '../../src/stores/redis/json-text.js';
import { redisRecordKey } from '../../src/stores/redis/keys.js';
import { decodeRecord, encodeFreshRecord, encodeResponse } from '../../src/stores/redis/record.js';
import { parseResponse } from '../../src/stores/redis/reply.js';

// Strings of every kind: ASCII, control characters, quotes and backslashes, non-ASCII, astral
// characters, and UTF-16 units on their own (lone surrogates).
const anyString = fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.string({ unit: fc.constantFrom('"', '\\', '\n', '\u0000', '\u001f', 'a', 'é', '\ud800', '\udfff', '😀') }));

describe('the Redis store writes JSON.stringify\'s text without calling it', () => {
  it('jsonString(s) is JSON.stringify(s), for any string', () => {
    fc.assert(fc.property(anyString, (s) => jsonString(s) === JSON.stringify(s)), { numRuns: 2_000 });
  });

  it('jsonPairs(pairs) is JSON.stringify(pairs), for any list of name/value pairs', () => {
    fc.assert(fc.property(fc.array(fc.tuple(anyString, anyString), { maxLength: 6 }), (pairs) => jsonPairs(pairs) === JSON.stringify(pairs)), { numRuns: 1_000 });
  });

  it('a record key is the SHA-256 of JSON.stringify([scope, key]), as records written before were found', () => {
    fc.assert(
      fc.property(anyString, anyString, (scope, key) => {
        const hex = createHash('sha256').update(JSON.stringify([scope, key])).digest('hex');
        return redisRecordKey('idemkit', { scope, key }) === `idemkit:{${hex}}`;
      }),
      { numRuns: 500 },
    );
    // One fixed value, so that a change of the text hashed (and so of every record's key) shows.
    expect(redisRecordKey('idemkit', { scope: 'POST /charges', key: 'a"b' })).toBe(
      `idemkit:{${createHash('sha256').update('["POST /charges","a\\"b"]').digest('hex')}}`,
    );
  });

  it('a fresh record reads back with its fingerprint and times, whatever its scope and key hold', () => {
    let token = 0;
    fc.assert(
      fc.property(anyString, anyString, fc.integer({ min: 1, max: 10 ** 9 }), fc.integer({ min: 1, max: 10 ** 10 }), (scope, key, leaseMs, windowMs) => {
        const now = 1_765_000_000_000;
        const ttlMs = Math.max(leaseMs, windowMs) + 60_000;
        const fingerprint = `v2:${String(token++).padStart(64, '0')}`;
        const text = encodeFreshRecord({ fingerprint, token: 'T'.repeat(32), leaseMs, windowMs, scope, key, ttlMs, now });
        const record = decodeRecord(Buffer.from(text, 'utf8'));
        expect(record).toMatchObject({ completed: false, fingerprint, leaseUntil: now + leaseMs, expiresAt: now + windowMs });
        // The JSON part is what JSON.stringify wrote before, byte for byte.
        expect(text.slice(108)).toBe(`${JSON.stringify([fingerprint, scope, key, false, false])}\n`);
      }),
      { numRuns: 300 },
    );
  });

  it('a completed record reads back its response, headers parsed once per text and never shared wrongly', () => {
    const corrupt = (reason: string) => new Error(reason) as never;
    const record = (fingerprint: string, headers: Array<[string, string]>, body: string) =>
      Buffer.concat([Buffer.from(`${encodeFreshRecord({ fingerprint, token: 'T'.repeat(32), leaseMs: 1, windowMs: 2, scope: '', key: 'k', ttlMs: 3, now: 4 })}`.replace(/^(.)I/, '$1C')), Buffer.from(encodeResponse(201, JSON.stringify(headers), Buffer.from(body)))]);
    const read = (value: Buffer) => {
      const r = decodeRecord(value)!;
      const [status, headers, omitted, body] = r.response!;
      return { fingerprint: r.fingerprint, response: parseResponse([status, headers, body, omitted], corrupt) };
    };
    const a = read(record('v2:a', [['content-type', 'application/json']], '{"id":1}'));
    const b = read(record('v2:b', [['content-type', 'text/plain'], ['x-id', '"q"']], 'two'));
    const again = read(record('v2:a', [['content-type', 'application/json']], '{"id":3}'));
    expect(a.fingerprint).toBe('v2:a');
    expect(a.response.headers).toEqual([['content-type', 'application/json']]);
    expect(b.response.headers).toEqual([['content-type', 'text/plain'], ['x-id', '"q"']]);
    expect(Buffer.from(again.response.body!).toString()).toBe('{"id":3}');
    expect(again.response.headers).toEqual(a.response.headers);
    // Shared between replays, so no reader may change them.
    expect(Object.isFrozen(again.response.headers) && Object.isFrozen(again.response.headers[0])).toBe(true);
    // A fingerprint with an escape is read by JSON.parse, to the same text.
    expect(read(record('v2:"quoted"\\', [], '')).fingerprint).toBe('v2:"quoted"\\');
  });
});
