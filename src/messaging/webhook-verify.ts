/**
 * Standard Webhooks verification (https://www.standardwebhooks.com): the sender signs
 * `${webhook-id}.${webhook-timestamp}.${body}` with HMAC-SHA256 and sends `v1,<base64>` entries,
 * space-separated, in `webhook-signature`. Pure: no store is touched.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { InvalidOptionError } from '../core/errors.js';
import type { Clock } from '../core/store.js';
import { integerOption } from '../core/validate.js';
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

/** Decodes the secrets once; a malformed secret is refused naming the option. */
export function webhookKeys(secret: VerifyOptions['secret']): Buffer[] {
  const list = Array.isArray(secret) ? (secret as readonly WebhookSecret[]) : [secret as WebhookSecret];
  if (list.length === 0) throw new InvalidOptionError('secret', 'expected at least one secret');
  return list.map((entry, index) => {
    const name = list.length > 1 ? `secret[${index}]` : 'secret';
    if (entry instanceof Uint8Array) {
      if (entry.byteLength === 0) throw new InvalidOptionError(name, 'the key is empty');
      return Buffer.from(entry);
    }
    if (typeof entry !== 'string') throw new InvalidOptionError(name, 'expected `whsec_<base64>` or the key bytes');
    const encoded = entry.startsWith('whsec_') ? entry.slice('whsec_'.length) : entry;
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) throw new InvalidOptionError(name, 'expected `whsec_` followed by base64');
    const key = Buffer.from(encoded, 'base64');
    if (key.byteLength === 0) throw new InvalidOptionError(name, 'the key is empty');
    return key;
  });
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
  return verifyWithKeys(headers, body, webhookKeys(options.secret), toleranceOption(options.toleranceSec), clockOption(options.clock));
}

export function toleranceOption(value: unknown): number {
  return integerOption('toleranceSec', value, DEFAULT_TOLERANCE_SEC, 1);
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
    const given = Buffer.from(entry.slice(comma + 1), 'base64');
    // timingSafeEqual needs equal lengths; the length of an HMAC is public.
    for (const mac of expected) if (given.byteLength === mac.byteLength && timingSafeEqual(given, mac)) return { id, timestamp };
  }
  throw new WebhookVerificationError('bad-signature', 'No `v1` entry of `webhook-signature` matches the body and secret');
}
