import { parseItem } from 'structured-headers';
import { InvalidKeyError } from './errors.js';

/** The longest key accepted, in characters (draft-07 leaves it to the server; Stripe uses 255). */
export const MAX_KEY_LENGTH = 255;

/** Restrictions beyond the draft's syntax. */
export interface KeyPolicy {
  /**
   * Reject keys shorter than this, to keep out low-entropy keys (timestamps, counters).
   * @default 1
   */
  readonly minLength?: number;
  /**
   * Require a UUID (any version, RFC 9562 text form) or a ULID (Crockford base32, 26 characters).
   * @default 'any'
   */
  readonly format?: 'any' | 'uuid' | 'ulid';
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const ULID = /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/i;
// A bare key: visible ASCII without the characters that would make it ambiguous with the
// sf-string form or with a comma-joined repeated header.
const BARE_KEY = /^[\x21\x23-\x2b\x2d-\x5b\x5d-\x7e]+$/;
// eslint-disable-next-line no-control-regex
const CONTROL_OR_NON_ASCII = /[\x00-\x1f\x7f-\uffff]/;

/**
 * Parse the Idempotency-Key header values of one request.
 *
 * `values` holds each occurrence of the header separately where the framework keeps them apart
 * (Node's `headersDistinct`); a WHATWG `Headers` object joins them with ", ", which the parser also
 * recognises. Returns `undefined` when the header is absent.
 *
 * Accepted forms, which denote the same key: the draft-07 sf-string (`"abc"`) and the bare value
 * most clients send (`abc`).
 */
export function parseIdempotencyKey(
  values: readonly string[] | string | null | undefined,
  header = 'Idempotency-Key',
  policy: KeyPolicy = {},
): string | undefined {
  if (values === null || values === undefined) return undefined;
  let value: string;
  if (typeof values === 'string') value = values;
  else if (values.length === 0) return undefined;
  else if (values.length > 1) throw new InvalidKeyError(header, 'the header is repeated; send exactly one key');
  else value = values[0] ?? '';
  const raw = withoutFieldSpace(value);
  // Nearly every key is a plain bare one (a UUID, a ULID): one pass over its characters says so,
  // where the checks below each scan it again (docs/performance.md). Anything else takes them.
  const key = isPlainBareKey(raw) ? raw : raw.startsWith('"') ? parseSfString(raw, header) : parseBare(raw, header);
  checkPolicy(key, header, policy);
  return key;
}

/**
 * A field value without the SP and HTAB around it, the only characters that surround one (RFC 9110
 * §5.5); String#trim would also drop line breaks, NBSP and BOM, taking `\u00a0abc` for the key `abc`.
 */
function withoutFieldSpace(value: string): string {
  let start = 0;
  let end = value.length;
  while (start < end && isFieldSpace(value.charCodeAt(start))) start++;
  while (end > start && isFieldSpace(value.charCodeAt(end - 1))) end--;
  return start === 0 && end === value.length ? value : value.slice(start, end);
}

function isFieldSpace(code: number): boolean {
  return code === 0x20 || code === 0x09;
}

/** True for a key `parseBare` accepts as it is: 1 to MAX_KEY_LENGTH characters of BARE_KEY's set. */
function isPlainBareKey(raw: string): boolean {
  const { length } = raw;
  if (length === 0 || length > MAX_KEY_LENGTH) return false;
  for (let i = 0; i < length; i++) {
    const code = raw.charCodeAt(i);
    // BARE_KEY: 0x21, 0x23-0x2b, 0x2d-0x5b, 0x5d-0x7e (no '"', ',' or '\\').
    if (code < 0x21 || code > 0x7e || code === 0x22 || code === 0x2c || code === 0x5c) return false;
  }
  return true;
}

function parseSfString(raw: string, header: string): string {
  if (CONTROL_OR_NON_ASCII.test(raw)) throw new InvalidKeyError(header, 'it contains control or non-ASCII characters');
  let item: ReturnType<typeof parseItem>;
  try {
    item = parseItem(raw);
  } catch {
    // A comma-joined repetition of quoted keys is the common cause of a parse failure.
    const reason = /^"[^"]*"\s*,/.test(raw)
      ? 'the header is repeated; send exactly one key'
      : 'it is not a valid structured-field string (draft-07 §2.1)';
    throw new InvalidKeyError(header, reason);
  }
  const value = item[0];
  if (typeof value !== 'string') throw new InvalidKeyError(header, 'it is not a structured-field string');
  return checkContent(value, header);
}

function parseBare(raw: string, header: string): string {
  if (raw.length === 0) throw new InvalidKeyError(header, 'the key is empty');
  if (CONTROL_OR_NON_ASCII.test(raw)) throw new InvalidKeyError(header, 'it contains control or non-ASCII characters');
  if (raw.includes(',')) throw new InvalidKeyError(header, 'it contains a comma (a repeated header, or a key that must be quoted)');
  if (!BARE_KEY.test(raw)) {
    throw new InvalidKeyError(header, 'an unquoted key may only contain visible ASCII without spaces, quotes or backslashes');
  }
  return checkContent(raw, header);
}

function checkContent(key: string, header: string): string {
  if (key.length === 0) throw new InvalidKeyError(header, 'the key is empty');
  if (key.length > MAX_KEY_LENGTH) throw new InvalidKeyError(header, `the key is longer than ${MAX_KEY_LENGTH} characters`);
  return key;
}

function checkPolicy(key: string, header: string, policy: KeyPolicy): void {
  if (policy.minLength !== undefined && key.length < policy.minLength) {
    throw new InvalidKeyError(header, `the key is shorter than ${policy.minLength} characters`);
  }
  if (policy.format === 'uuid' && !UUID.test(key)) throw new InvalidKeyError(header, 'the key must be a UUID');
  if (policy.format === 'ulid' && !ULID.test(key)) throw new InvalidKeyError(header, 'the key must be a ULID');
}
