/**
 * Standard Webhooks verification (https://www.standardwebhooks.com): the sender signs
 * `${webhook-id}.${webhook-timestamp}.${body}` with HMAC-SHA256 and sends `v1,<base64>` entries,
 * space-separated, in `webhook-signature`. Pure: no store is touched.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { InvalidOptionError } from '../core/errors.js';
import type { Clock } from '../core/store.js';
import { checkInteger, optionReader } from '../core/option-reader.js';
import { WebhookVerificationError } from './errors.js';
import { clockOption } from './table.js';

/** A secret as the sender shows it (`whsec_<base64>`, or the bare base64), or the raw key bytes. */
export type WebhookSecret = string | Uint8Array;

/** Default allowed distance between `webhook-timestamp` and now, both ways: 5 minutes. */
export const DEFAULT_TOLERANCE_SEC = 300;

/** Headers as a Fetch `Headers`, or Node's lower-cased `IncomingHttpHeaders`. */
export type HeadersLike = { get(name: string): string | null } | Readonly<Record<string, string | readonly string[] | undefined>>;

export interface VerifyOptions {
  /** One secret, or several during a rotation (any one may match). */
  readonly secret: WebhookSecret | readonly WebhookSecret[];
  /** Seconds the timestamp may differ from now, either way. @default 300 */
  readonly toleranceSec?: number;
  readonly clock?: Clock;
}

export interface VerifiedWebhook {
  /** `webhook-id`: the event id, the same on every retry of one event. */
  readonly id: string;
  /** `webhook-timestamp`, in seconds. */
  readonly timestamp: number;
}

/**
 * Fewest key bytes a secret may have. The specification asks senders for 24 to 64 random bytes;
 * 16 (128 bits, the strength of AES-128 and the usual floor for symmetric keys) still accepts a
 * sender that issues 128-bit keys, while a short or hand-typed secret, which an attacker could
 * search, is refused.
 */
export const MIN_SECRET_BYTES = 16;

/** HMAC-SHA256 is 32 bytes; its base64 is 43 characters and one `=`. */
const MAC_BYTES = 32;
const MAC_BASE64_LENGTH = 44;

const FORM = '`whsec_` followed by standard base64 (A–Z a–z 0–9 + /, padded with = to a multiple of 4)';

/**
 * Decodes the secrets once; a malformed or weak secret is refused naming the option. The error
 * never quotes the secret: error messages end up in logs.
 */
export function webhookKeys(secret: VerifyOptions['secret']): Buffer[] {
  const list = Array.isArray(secret) ? (secret as readonly WebhookSecret[]) : [secret as WebhookSecret];
  if (list.length === 0) throw new InvalidOptionError('secret', 'expected at least one secret');
  return list.map((entry, index) => {
    const name = list.length > 1 ? `secret[${index}]` : 'secret';
    let key: Buffer;
    if (entry instanceof Uint8Array) key = Buffer.from(entry);
    else if (typeof entry === 'string') key = decodeSecret(name, entry);
    else throw new InvalidOptionError(name, `expected ${FORM}, or the key bytes as a Uint8Array`);
    if (key.byteLength < MIN_SECRET_BYTES) {
      throw new InvalidOptionError(
        name,
        `the key is ${key.byteLength} byte(s); at least ${MIN_SECRET_BYTES} random bytes are required (Standard Webhooks secrets are 24 to 64 bytes)`,
      );
    }
    return key;
  });
}

function decodeSecret(name: string, text: string): Buffer {
  const encoded = text.startsWith('whsec_') ? text.slice('whsec_'.length) : text;
  if (encoded.length === 0) throw new InvalidOptionError(name, `the key is empty; expected ${FORM}`);
  if (/\s/.test(encoded)) throw new InvalidOptionError(name, `contains whitespace (a line break from an env file?); expected ${FORM}`);
  if (/[-_]/.test(encoded) && /^[A-Za-z0-9_-]+=*$/.test(encoded)) {
    throw new InvalidOptionError(name, `is base64url (- or _), not standard base64; expected ${FORM}`);
  }
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) throw new InvalidOptionError(name, `contains characters outside base64; expected ${FORM}`);
  // Hex digits are base64 characters too, so a hex secret would decode into different key bytes
  // and every signature would fail. Base64 of 16+ random bytes is all hex digits of one case with
  // a probability below 10^-13, so such a text is taken for hex and refused.
  if (/^(?:[0-9a-f]+|[0-9A-F]+)$/.test(encoded)) {
    throw new InvalidOptionError(
      name,
      `looks like hex, not base64; expected ${FORM}. If your sender signs with the bytes the hex stands for, pass them: Buffer.from(hex, 'hex')`,
    );
  }
  const key = Buffer.from(encoded, 'base64');
  // Only canonical base64 re-encodes to itself: this refuses missing or extra padding and
  // non-zero trailing bits, which a lenient decoder would accept and silently drop.
  if (key.toString('base64') !== encoded) throw new InvalidOptionError(name, `is not canonical base64 (padding missing or extra); expected ${FORM}`);
  return key;
}

/**
 * The MAC in a `v1,` entry, or undefined unless it is exactly the standard, padded base64 of 32
 * bytes. Anything else (junk appended, base64url, missing or extra padding, whitespace, a
 * truncated or longer value) never matches: one signature has one accepted spelling.
 */
function decodeMac(text: string): Buffer | undefined {
  if (text.length !== MAC_BASE64_LENGTH) return undefined;
  const mac = Buffer.from(text, 'base64');
  return mac.byteLength === MAC_BYTES && mac.toString('base64') === text ? mac : undefined;
}

function header(headers: HeadersLike, name: string): string | undefined {
  if (typeof (headers as { get?: unknown }).get === 'function') return (headers as { get(n: string): string | null }).get(name) ?? undefined;
  const value = (headers as Record<string, string | readonly string[] | undefined>)[name];
  return Array.isArray(value) ? value.join(' ') : (value as string | undefined);
}

function signature(key: Buffer, id: string, timestamp: string, body: Uint8Array | string): Buffer {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest();
}

/** The `webhook-signature` value a sender puts on a message (for senders and tests). */
export function signWebhook(secret: WebhookSecret, id: string, timestamp: number, body: Uint8Array | string): string {
  const [key] = webhookKeys(secret);
  return `v1,${signature(key!, id, String(timestamp), body).toString('base64')}`;
}

/**
 * Verifies headers and the RAW body (the exact bytes received: a re-serialised JSON body does not
 * match). Throws WebhookVerificationError with a `reason`; answers the id and timestamp.
 */
export function verifyWebhook(headers: HeadersLike, body: Uint8Array | string, options: VerifyOptions): VerifiedWebhook {
  const read = optionReader('verifyWebhook()', options, { aliases: WEBHOOK_ALIASES });
  const keys = webhookKeys(read.value('secret'));
  const toleranceSec = toleranceOption(read.value('toleranceSec'));
  const clock = clockOption(read.value('clock'));
  read.done();
  return verifyWithKeys(headers, body, keys, toleranceSec, clock);
}

/** Names other webhook libraries use for our options. */
export const WEBHOOK_ALIASES = { secrets: 'secret', tolerance: 'toleranceSec', handler: 'onEvent' };

export function toleranceOption(value: unknown): number {
  return checkInteger('toleranceSec', value, { default: DEFAULT_TOLERANCE_SEC, min: 1 });
}

export function verifyWithKeys(headers: HeadersLike, body: Uint8Array | string, keys: readonly Buffer[], toleranceSec: number, clock: Clock): VerifiedWebhook {
  const id = header(headers, 'webhook-id');
  const stamp = header(headers, 'webhook-timestamp');
  const signatures = header(headers, 'webhook-signature');
  if (!id || !stamp || !signatures) {
    const missing = [!id && 'webhook-id', !stamp && 'webhook-timestamp', !signatures && 'webhook-signature'].filter(Boolean).join(', ');
    throw new WebhookVerificationError('missing-headers', `Missing webhook header(s): ${missing}`);
  }
  if (!/^\d{1,12}$/.test(stamp)) throw new WebhookVerificationError('bad-timestamp', '`webhook-timestamp` is not an integer number of seconds');
  const timestamp = Number(stamp);
  const now = Math.floor(clock() / 1000);
  if (Math.abs(now - timestamp) > toleranceSec) {
    throw new WebhookVerificationError('stale-timestamp', `\`webhook-timestamp\` is more than ${toleranceSec} s from now (replayed or clock skew)`);
  }
  const expected = keys.map((key) => signature(key, id, stamp, body));
  for (const entry of signatures.split(' ')) {
    const comma = entry.indexOf(',');
    if (comma === -1 || entry.slice(0, comma) !== 'v1') continue;
    const given = decodeMac(entry.slice(comma + 1));
    if (given === undefined) continue;
    // Both are 32 bytes; the comparison takes the same time wherever they differ.
    for (const mac of expected) if (timingSafeEqual(given, mac)) return { id, timestamp };
  }
  throw new WebhookVerificationError(
    'bad-signature',
    'No `v1` entry of `webhook-signature` is a signature of the body with the secret (exactly 44 characters of standard base64)',
  );
}
