import { createHash, hash } from 'node:crypto';
import { canonicalJson, canonicalJsonText, parseJsonKeepingDigits } from './canonical-json.js';

/** What identifies "the same request" for one key. */
export interface FingerprintInput {
  readonly method: string;
  /** Path with the query string, as received. */
  readonly path: string;
  /** The `Content-Type` header; its media type (without parameters) is part of the fingerprint. */
  readonly contentType?: string | null | undefined;
  /** The raw body bytes. */
  readonly body: Uint8Array;
  /**
   * The body as a framework's parser left it, for when its bytes are gone (`body` is empty): a
   * Fastify route whose bytes were not kept, Express after `express.json()` without a `verify`
   * that keeps `req.rawBody`. When `body` has bytes, the bytes decide (a parsed number has lost
   * the digits a double cannot hold), and this must then be JSON.parse of them: it only spares
   * parsing them again.
   */
  readonly parsedJson?: { readonly value: unknown };
}

export interface FingerprintOptions {
  /**
   * Hash only these fields of a JSON body (dotted paths such as `customer.id`), for APIs whose
   * clients add volatile fields (timestamps, trace ids) on retry. Non-JSON bodies are hashed whole.
   * @default undefined (the whole body)
   */
  readonly fields?: readonly string[];
}

/**
 * The version of the fingerprint's form, written in front of every fingerprint (`v2:<hex>`, or
 * `v2:<fields digest>:<hex>` under `fingerprintFields`). A fingerprint of another version never
 * equals one of this version, so a record written before an upgrade that changed the form answers
 * a retry with 422 rather than compare unlike things.
 * v1 (no prefix): no media type, numbers compared as doubles.
 */
export const FINGERPRINT_VERSION = 'v2';

/**
 * How a stored fingerprint was computed, read from its form: `fieldsDigest` is the digest of the
 * `fingerprintFields` it was made with (see `fieldsDigest`), or undefined for `v2:<hex>`, which is
 * the whole body (or, from a release before the digest was written, possibly some field list).
 * Undefined for a form this release does not write (v1's bare hex, anything else).
 */
export function fingerprintForm(stored: string): { readonly fieldsDigest: string | undefined; readonly hex: string } | undefined {
  const match = FORM.exec(stored);
  return match === null ? undefined : { fieldsDigest: match[1], hex: match[2]! };
}
const FORM = /^v2:(?:([0-9a-f]{16}):)?([0-9a-f]{64})$/;

/**
 * The digest a fingerprint made with these `fingerprintFields` carries: 16 hex digits of the
 * SHA-256 of the sorted list (the fingerprint hashes the fields in sorted order, so the order they
 * are listed in changes neither). It only names the settings: two lists that shared a digest would
 * still have to produce equal hashes of the request before anything is replayed.
 */
export function fieldsDigest(fields: readonly string[]): string {
  let known = digests.get(fields);
  if (known === undefined) digests.set(fields, (known = hash('sha256', JSON.stringify([...fields].sort()), 'hex').slice(0, 16)));
  return known;
}
// Keyed by the options' own array: a request does not hash the list again.
const digests = new WeakMap<readonly string[], string>();

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** `application/json` and every `application/*+json` media type. */
export function isJsonMediaType(contentType: string): boolean {
  return JSON_TYPE.test(contentType);
}

/**
 * The media type of a Content-Type header as the fingerprint writes it: its essence (type/subtype,
 * lowercased, without parameters and spaces) as a JSON string, or `null` when the request has none.
 * A header present but empty is `""`, which no other header gives.
 */
export function mediaTypeField(contentType: string | null | undefined): string {
  if (contentType === undefined || contentType === null) return 'null';
  // Nearly every request of a service has the same Content-Type: the last answer is kept.
  if (contentType === lastContentType) return lastMediaTypeField;
  const semicolon = contentType.indexOf(';');
  const essence = (semicolon === -1 ? contentType : contentType.slice(0, semicolon)).trim().toLowerCase();
  lastContentType = contentType;
  lastMediaTypeField = JSON.stringify(essence);
  return lastMediaTypeField;
}
let lastContentType = 'application/json';
let lastMediaTypeField = '"application/json"';

/**
 * `v2:` and the SHA-256 (hex) over the method, the path with its query string, the media type and
 * the body. A JSON body (by its media type) that parses is canonicalised (RFC 8785 form, numbers by
 * their exact decimal value: see canonicalNumber), so key order, whitespace and number spelling do
 * not matter; anything else, including a body that claims JSON but does not parse, is hashed as raw
 * bytes. Never throws: a value a parser produced is encoded whatever it holds (see canonicalJson).
 * With `fields`, the form says so: `v2:<fieldsDigest(fields)>:<hex>`, whatever the body, so that an
 * instance with other settings can tell how a stored fingerprint was made and check a retry that way.
 */
export function fingerprint(input: FingerprintInput, options: FingerprintOptions = {}): string {
  const { fields } = options;
  const made = bodyFingerprint(input, fields);
  return fields === undefined ? made : `${FINGERPRINT_VERSION}:${fieldsDigest(fields)}${made.slice(FINGERPRINT_VERSION.length)}`;
}

function bodyFingerprint(input: FingerprintInput, fields: readonly string[] | undefined): string {
  // Canonical JSON is hashed one-shot as one string: for bodies of that size a Hash object with
  // several update() calls costs more than the hashing itself.
  const { contentType, body, parsedJson } = input;
  const head = `${upperCase(input.method)}\n${input.path}\n${mediaTypeField(contentType)}\n`;
  const json = contentType !== undefined && contentType !== null && isJsonMediaType(contentType);
  if (body.byteLength === 0 && parsedJson !== undefined) {
    // The bytes are gone; the parsed value stands in for them.
    const { value } = parsedJson;
    if (json) return digest(`${head}json\n${canonicalJson(fields ? selectFields(value, fields) : value)}`);
    if (typeof value === 'string') return digest(`${head}raw\n${value}`);
    if (value instanceof Uint8Array) return rawDigest(head, value);
    return digest(`${head}value\n${canonicalJson(value)}`);
  }
  if (json) {
    const canonical = canonicalJsonBody(body, fields, parsedJson);
    if (canonical !== undefined) return digest(`${head}json\n${canonical}`);
  }
  return rawDigest(head, body);
}

/** `method.toUpperCase()`, without the call for a method that is upper case already (nearly all). */
function upperCase(method: string): string {
  return method === 'POST' || method === 'PATCH' || method === 'PUT' ? method : method.toUpperCase();
}

function digest(text: string): string {
  return `${FINGERPRINT_VERSION}:${hash('sha256', text, 'hex')}`;
}

function rawDigest(head: string, body: Uint8Array): string {
  // Raw bodies may be large: hashed in two updates rather than copied behind the prefix.
  return `${FINGERPRINT_VERSION}:${createHash('sha256').update(`${head}raw\n`).update(body).digest('hex')}`;
}

/**
 * The canonical text of a JSON body, or undefined when it is not UTF-8 JSON. `parsed`, the body as
 * the adapter parsed it, spares a second parse where no digits can have been lost.
 */
function canonicalJsonBody(
  body: Uint8Array,
  fields: readonly string[] | undefined,
  parsed: { readonly value: unknown } | undefined,
): string | undefined {
  if (body.byteLength === 0) return undefined;
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    return undefined;
  }
  if (!fields) return canonicalJsonText(text, parsed);
  const value = parseJsonKeepingDigits(text, parsed);
  return value === undefined ? undefined : canonicalJson(selectFields(value.value, fields));
}

function selectFields(value: unknown, fields: readonly string[]): unknown[] {
  // [field] for an absent field, [field, value] for a present one: a missing field and a null
  // field are different requests, and no value can imitate absence. Only own members count, so
  // a field named `constructor` is absent from a body that does not have it.
  return [...fields].sort().map((field) => {
    let current: unknown = value;
    for (const part of field.split('.')) {
      current = current !== null && typeof current === 'object' && Object.hasOwn(current, part) ? (current as Record<string, unknown>)[part] : undefined;
    }
    return current === undefined ? [field] : [field, current];
  });
}
