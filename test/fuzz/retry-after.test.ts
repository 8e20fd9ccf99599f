/**
 * Fuzzing the client's `Retry-After` parsing (src/client/backoff.ts) and its use by the client:
 * whatever a server sends, the wait is a finite, non-negative, capped number of ms, or none.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_RETRY_AFTER_MS, parseRetryAfter } from '../../src/client/backoff.js';
import { createIdempotentFetch } from '../../src/client/index.js';
import { anyUtf16, fuzz, FUZZ_TIMEOUT, fuzzAsync } from './fuzz.js';

/** Date.parse's range: ±8.64e15 ms around the epoch. */
const DATE_LIMIT = 8.64e15;
const WEEKDAYS = ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun', 'Monday', 'Sunday', 'Xyz'];
const MONTHS = ['Jan', 'Feb', 'Nov', 'Dec', 'Foo'];

const digits = fc.string({ unit: fc.constantFrom(...'0123456789'), minLength: 1, maxLength: 400 });
const number = fc.oneof(
  digits,
  fc.double().map(String), // -0, 1e+21, NaN, Infinity, fractions
  fc.bigInt().map(String),
  fc.tuple(digits, digits).map(([a, b]) => `${a}.${b}`),
  digits.map((d) => `-${d}`),
  digits.map((d) => `+${d}`),
  digits.map((d) => `${d}e9`),
);
/** Things shaped like an HTTP-date, with years, days and times in and out of range. */
const dateLike = fc
  .tuple(
    fc.constantFrom(...WEEKDAYS),
    fc.constantFrom(', ', ' ', ','),
    fc.integer({ min: -5, max: 99 }),
    fc.constantFrom(...MONTHS),
    fc.oneof(fc.integer({ min: -300_000, max: 300_000 }), fc.integer({ min: 1900, max: 2100 })),
    fc.integer({ min: 0, max: 99 }),
    fc.constantFrom(' GMT', '', ' UTC', ' +0100', ' PST', ' GMT garbage'),
  )
  .map(([day, sep, date, month, year, minute, zone]) => `${day}${sep}${String(date).padStart(2, '0')} ${month} ${year} 08:${String(minute).padStart(2, '0')}:37${zone}`);
const realDate = fc.date({ noInvalidDate: true }).map((d) => d.toUTCString());
const retryAfter = fc.oneof(number, dateLike, realDate, anyUtf16({ maxLength: 60 }), fc.constantFrom('', ' ', '0', '00', ' 5 ', '\t7\t'));
const now = fc.oneof(fc.integer({ min: -DATE_LIMIT, max: DATE_LIMIT }), fc.constant(Date.now()));

function checkWait(wait: number | undefined): void {
  if (wait === undefined) return;
  expect(Number.isFinite(wait)).toBe(true);
  expect(wait).toBeGreaterThanOrEqual(0);
  expect(wait).toBeLessThanOrEqual(MAX_RETRY_AFTER_MS);
}

describe('fuzz: Retry-After', FUZZ_TIMEOUT, () => {
  it('is a finite, non-negative, capped wait in ms, or none', () => {
    fuzz(
      fc.property(retryAfter, now, (value, at) => {
        checkWait(parseRetryAfter(value, at));
      }),
    );
  });

  it('reads delay-seconds as seconds (capped) and refuses signs, fractions and exponents', () => {
    fuzz(
      fc.property(number, fc.constantFrom('', ' ', '\t'), (value, space) => {
        const wait = parseRetryAfter(`${space}${value}${space}`, 0);
        if (/^\d+$/.test(value)) expect(wait).toBe(Math.min(Number(value) * 1000, MAX_RETRY_AFTER_MS));
        else if (!/^[A-Za-z]/.test(value)) expect(wait).toBeUndefined();
      }),
    );
  });

  it('reads an IMF-fixdate as the time until it (0 once past)', () => {
    fuzz(
      fc.property(fc.date({ noInvalidDate: true, min: new Date(0), max: new Date(253402300799000) }), now, (date, at) => {
        const whole = Math.floor(date.getTime() / 1000) * 1000;
        expect(parseRetryAfter(date.toUTCString(), at)).toBe(Math.min(Math.max(0, whole - at), MAX_RETRY_AFTER_MS));
      }),
    );
  });

  it('the client retries a 503 at once only when its Retry-After asks for no wait, and never throws over it', async () => {
    await fuzzAsync(
      fc.asyncProperty(retryAfter, async (value) => {
        let headers: Headers;
        try {
          headers = new Headers({ 'retry-after': value });
        } catch {
          return; // not a value a response can carry
        }
        const wait = parseRetryAfter(headers.get('retry-after'));
        checkWait(wait);
        let calls = 0;
        const retryAfters: Array<number | undefined> = [];
        const client = createIdempotentFetch({
          retries: 1,
          minTimeout: 0,
          maxTimeout: 0,
          maxRetryAfter: 0, // any wait settles: no run sleeps
          retryBudget: false,
          onRetry: (context) => void retryAfters.push(context.retryAfter),
          fetch: async () => (++calls === 1 ? new Response(null, { status: 503, headers }) : new Response('ok')),
        });
        const response = await client('http://fuzz.invalid/pay', { method: 'POST', body: 'x' });
        // A date a few ms ahead may have passed by the client's own reading: then it retried.
        if (wait === undefined || wait === 0) {
          expect(calls).toBe(2);
          expect(response.status).toBe(200);
          retryAfters.forEach(checkWait);
        } else if (wait > 5_000) {
          expect(calls).toBe(1);
          expect(response.status).toBe(503);
        }
      }),
      0.5,
    );
  });
});

describe('fuzz regressions: Retry-After', FUZZ_TIMEOUT, () => {
  // Found by 'is a finite, non-negative, capped wait': 400 digits of delay-seconds were Infinity
  // ms, and 22 digits 1e+24 ms, which the client would have slept on with maxRetryAfter: Infinity.
  it.each(['9'.repeat(400), '1'.padEnd(22, '0'), '2147484'])('caps %j at MAX_RETRY_AFTER_MS', (value) => {
    expect(parseRetryAfter(value, 0)).toBe(MAX_RETRY_AFTER_MS);
  });

  it('caps an HTTP-date at the far end of the Date range', () => {
    expect(parseRetryAfter('Fri, 31 Dec 275759 23:59:59 GMT', -8.64e15)).toBe(MAX_RETRY_AFTER_MS);
  });
});
