/**
 * What every store's decoder owes a corrupted record (test/fuzz/*-records.test.ts): the typed
 * CorruptRecordError, or exactly what the row holds when that is a valid record. Never a replay of
 * something no HTTP response can be, and never another error.
 */
import { expect } from 'vitest';
import { CorruptRecordError } from '../../src/core/errors.js';
import type { IdempotencyStore, RecordRef, StoredResponse } from '../../src/core/store.js';

export const GOOD_RESPONSE: StoredResponse = {
  status: 201,
  headers: [
    ['content-type', 'application/json'],
    ['x-request-id', 'a1'],
  ],
  body: new TextEncoder().encode('{"id":1}'),
  bodyOmitted: false,
};
export const CLAIM_OPTIONS = { leaseMs: 60_000, windowMs: 3_600_000 };

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** The answer of a store call on a corrupted record: its value, or the CorruptRecordError; anything else is rethrown. */
export async function settle<T>(call: () => Promise<T>): Promise<T | CorruptRecordError> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof CorruptRecordError) {
      expect(error.code).toBe('ERR_IDEMKIT_CORRUPT_RECORD');
      return error;
    }
    throw error;
  }
}

/** What a response row holds, decoded by the test: the response, or 'invalid' when no HTTP response is that. */
export function expectedResponse(status: unknown, headersJson: unknown, body: unknown, omitted: unknown): StoredResponse | 'invalid' {
  if (typeof status !== 'number' || !Number.isInteger(status) || status < 100 || status > 999) return 'invalid';
  if (typeof headersJson !== 'string') return 'invalid';
  let headers: unknown;
  try {
    headers = JSON.parse(headersJson);
  } catch {
    return 'invalid';
  }
  const valid =
    Array.isArray(headers) &&
    headers.every((h) => Array.isArray(h) && h.length === 2 && typeof h[0] === 'string' && TOKEN.test(h[0]) && typeof h[1] === 'string' && FIELD_VALUE.test(h[1]));
  if (!valid) return 'invalid';
  if (omitted !== true && omitted !== false) return 'invalid';
  if (omitted) return { status, headers: headers as Array<[string, string]>, body: null, bodyOmitted: true };
  if (body !== null && !(body instanceof Uint8Array)) return 'invalid';
  return { status, headers: headers as Array<[string, string]>, body: body === null ? new Uint8Array(0) : Uint8Array.from(body), bodyOmitted: false };
}

/** A replayed response must be exactly the valid response the row holds. */
export function checkReplay(response: StoredResponse, expected: StoredResponse | 'invalid'): void {
  expect(expected, 'a replay of a response no HTTP response can be').not.toBe('invalid');
  const want = expected as StoredResponse;
  expect(response.status).toBe(want.status);
  expect(response.headers).toEqual(want.headers);
  expect(response.bodyOmitted).toBe(want.bodyOmitted);
  if (want.body === null) expect(response.body).toBeNull();
  else expect(Buffer.from(response.body!).equals(Buffer.from(want.body))).toBe(true);
}

/** Every decoded time is a safe integer. */
export function checkTimes(...times: number[]): void {
  for (const time of times) expect(Number.isSafeInteger(time)).toBe(true);
}

/** A record's createdAt and updatedAt: undefined (unknown), or safe integers; never anything else. */
export function checkRecordTimes(record: { createdAt?: number | undefined; updatedAt?: number | undefined }): void {
  for (const time of [record.createdAt, record.updatedAt]) if (time !== undefined) expect(Number.isSafeInteger(time)).toBe(true);
}

/**
 * Claims and reads a corrupted record (ref, fingerprint 'fp') and checks both answers; `held` reads
 * what the row holds now, as a response. Answers whether either call refused with the typed error.
 */
export async function checkCorrupted(
  store: IdempotencyStore,
  ref: RecordRef,
  held: () => Promise<StoredResponse | 'invalid'>,
): Promise<boolean> {
  let refused = false;
  const before = await held();
  const claim = await settle(() => store.claim(ref, 'fp', CLAIM_OPTIONS));
  if (claim instanceof CorruptRecordError) refused = true;
  else if (claim.kind === 'completed') checkReplay(claim.response, before);
  else if (claim.kind === 'in_flight') expect(Number.isFinite(claim.retryAfterMs) && claim.retryAfterMs > 0).toBe(true);
  // A claim that took the record over rewrote it: read what is there now.
  const record = await settle(() => store.get(ref));
  if (record instanceof CorruptRecordError) return true;
  if (record === undefined) return refused;
  expect(['in_flight', 'completed']).toContain(record.state);
  expect(typeof record.fingerprint).toBe('string');
  checkTimes(record.leaseUntil, record.expiresAt);
  checkRecordTimes(record);
  if (record.state === 'completed') checkReplay(record.response!, await held());
  return refused;
}

/** Claims `ref` with fingerprint 'fp' and completes it with GOOD_RESPONSE. */
export async function completeGood(store: IdempotencyStore, ref: RecordRef): Promise<void> {
  const claim = await store.claim(ref, 'fp', CLAIM_OPTIONS);
  if (claim.kind !== 'acquired') throw new Error(`expected acquired, got ${claim.kind}`);
  await store.complete(ref, claim.token, GOOD_RESPONSE);
}
