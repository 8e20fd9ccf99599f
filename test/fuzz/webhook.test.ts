/**
 * Fuzzing Standard Webhooks verification (src/messaging/webhook-verify.ts): arbitrary headers and
 * bodies end in a verified event or the typed WebhookVerificationError; a valid signature always
 * verifies; changing any one byte of what was signed, or of the signature, refuses.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import { WebhookVerificationError } from '../../src/messaging/errors.js';
import { MIN_SECRET_BYTES, signWebhook, verifyWebhook, webhookKeys } from '../../src/messaging/webhook-verify.js';
import type { HeadersLike } from '../../src/messaging/webhook-verify.js';
import { anyUtf16, fuzz, FUZZ_TIMEOUT, thrown } from './fuzz.js';

const NOW_MS = 1_700_000_000_000;
const NOW_SEC = NOW_MS / 1000;
const clock = () => NOW_MS;
const secretBytes = fc.uint8Array({ minLength: MIN_SECRET_BYTES, maxLength: 64 });
const base64Chars = [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/='];

/** A header value as a client might send it: anything, digits, or something shaped like a signature. */
const headerText = fc.oneof(
  anyUtf16({ maxLength: 80 }),
  fc.string({ unit: fc.constantFrom(...'0123456789'), maxLength: 14 }),
  fc.integer({ min: NOW_SEC - 600, max: NOW_SEC + 600 }).map(String),
  fc.string({ unit: fc.constantFrom(...base64Chars, ',', ' ', 'v', '1', '2'), maxLength: 120 }),
  fc.uint8Array({ minLength: 30, maxLength: 34 }).map((mac) => `v1,${Buffer.from(mac).toString('base64')}`),
);
const headerField = fc.option(fc.oneof(headerText, fc.array(headerText, { maxLength: 3 })), { nil: undefined });
const body = fc.oneof(anyUtf16({ maxLength: 200 }), fc.uint8Array({ maxLength: 200 }));

/** Calls verifyWebhook; anything thrown but the typed refusal fails the property. */
function verify(headers: HeadersLike, payload: string | Uint8Array, secret: Uint8Array | readonly Uint8Array[]) {
  const error = thrown(() => verifyWebhook(headers, payload, { secret, clock }));
  if (error !== undefined && !(error instanceof WebhookVerificationError)) throw error;
  return error === undefined ? 'verified' : error.reason;
}

describe('fuzz: webhook signature', FUZZ_TIMEOUT, () => {
  it('answers arbitrary headers and bodies with a verified event or the typed refusal', () => {
    fuzz(
      fc.property(headerField, headerField, headerField, body, secretBytes, fc.boolean(), (id, stamp, signature, payload, secret, fetchHeaders) => {
        const record: Record<string, string | string[] | undefined> = { 'webhook-id': id, 'webhook-timestamp': stamp, 'webhook-signature': signature };
        let headers: HeadersLike = record;
        if (fetchHeaders) {
          const h = new Headers();
          try {
            for (const [name, value] of Object.entries(record)) for (const v of value === undefined ? [] : [value].flat()) h.append(name, v);
          } catch {
            return; // a value Headers itself refuses
          }
          headers = h;
        }
        expect(['verified', 'missing-headers', 'bad-timestamp', 'stale-timestamp', 'bad-signature']).toContain(verify(headers, payload, secret));
      }),
    );
  });

  it('verifies every validly signed message, among other entries and with rotated secrets', () => {
    fuzz(
      fc.property(
        anyUtf16({ minLength: 1, maxLength: 40 }).filter((id) => id.isWellFormed()),
        fc.integer({ min: NOW_SEC - 300, max: NOW_SEC + 300 }),
        fc.oneof(fc.uint8Array({ maxLength: 300 }), anyUtf16({ maxLength: 200 }).filter((s) => s.isWellFormed())),
        fc.array(secretBytes, { minLength: 1, maxLength: 3 }),
        fc.nat(),
        fc.array(headerText.filter((entry) => !entry.includes(' ')), { maxLength: 3 }),
        (id, timestamp, payload, secrets, which, others) => {
          const signature = signWebhook(secrets[which % secrets.length]!, id, timestamp, payload);
          const entries = [...others, signature, ...others.slice(1)].join(' ');
          const headers = { 'webhook-id': id, 'webhook-timestamp': String(timestamp), 'webhook-signature': entries };
          expect(verifyWebhook(headers, payload, { secret: secrets, clock })).toEqual({ id, timestamp });
        },
      ),
    );
  });

  it('refuses a message with any one byte changed: body, id, timestamp or signature', () => {
    fuzz(
      fc.property(
        fc.string({ unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789_-.'), minLength: 1, maxLength: 30 }),
        fc.integer({ min: NOW_SEC - 300, max: NOW_SEC + 300 }),
        fc.uint8Array({ maxLength: 300 }),
        secretBytes,
        fc.constantFrom('body', 'id', 'timestamp', 'signature'),
        fc.nat(),
        fc.integer({ min: 1, max: 255 }),
        (id, timestamp, payload, secret, part, at, delta) => {
          const signature = signWebhook(secret, id, timestamp, payload);
          const fields = { id, timestamp: String(timestamp), signature, payload };
          const flip = (text: string) => {
            const bytes = Buffer.from(text, 'latin1');
            const i = at % bytes.length;
            bytes[i] = (bytes[i]! + delta) % 256;
            return bytes.toString('latin1');
          };
          if (part === 'body') {
            if (payload.length === 0) return;
            const changed = Uint8Array.from(payload);
            changed[at % changed.length] = (changed[at % changed.length]! + delta) % 256;
            fields.payload = changed;
          } else fields[part] = flip(fields[part]);
          const headers = { 'webhook-id': fields.id, 'webhook-timestamp': fields.timestamp, 'webhook-signature': fields.signature };
          expect(verify(headers, fields.payload, secret)).not.toBe('verified');
        },
      ),
    );
  });

  it('decodes any secret text to its key bytes or refuses it with the typed option error', () => {
    fuzz(
      fc.property(
        fc.oneof(
          anyUtf16({ maxLength: 100 }),
          fc.string({ unit: fc.constantFrom(...base64Chars, '-', '_'), maxLength: 100 }).map((s) => `whsec_${s}`),
          secretBytes.map((bytes) => `whsec_${Buffer.from(bytes).toString('base64')}`),
        ),
        (text) => {
          let keys: Buffer[] | undefined;
          const error = thrown(() => (keys = webhookKeys(text)));
          if (error !== undefined) {
            expect(error).toBeInstanceOf(InvalidOptionError);
            const secretPart = text.replace(/^whsec_/, '');
            if (secretPart.length >= 8) expect((error as Error).message).not.toContain(secretPart); // never quotes the secret
            return;
          }
          const encoded = text.replace(/^whsec_/, '');
          expect(Buffer.from(keys![0]!).toString('base64')).toBe(encoded);
          expect(keys![0]!.byteLength).toBeGreaterThanOrEqual(MIN_SECRET_BYTES);
        },
      ),
    );
  });

  it('round-trips every secret of 16+ bytes given as whsec_<base64>, unless its base64 looks like hex', () => {
    fuzz(
      fc.property(secretBytes, (bytes) => {
        const encoded = Buffer.from(bytes).toString('base64');
        const error = thrown(() => expect(webhookKeys(`whsec_${encoded}`)[0]).toEqual(Buffer.from(bytes)));
        if (error === undefined) return;
        expect(error).toBeInstanceOf(InvalidOptionError);
        expect(encoded).toMatch(/^(?:[0-9a-f]+|[0-9A-F]+)$/);
      }),
    );
  });
});
