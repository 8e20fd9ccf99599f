import { createHash, hash } from 'node:crypto';
import { canonicalJson } from './canonical-json.js';

/** What identifies "the same request" for one key. */
export interface FingerprintInput {
  readonly method: string;
  /** Path with the query string, as received. */
  readonly path: string;
  readonly contentType?: string | null | undefined;
  /** The raw body bytes. */
  readonly body: Uint8Array;
  /**
   * The body as a framework's JSON parser already parsed it. Used instead of `body` for a JSON
   * media type, so the body is not parsed twice: canonicalising the parsed value is what the raw
   * bytes would have given, since raw JSON bodies are parsed before they are canonicalised.
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

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** `application/json` and every `application/*+json` media type. */
export function isJsonMediaType(contentType: string): boolean {
  return JSON_TYPE.test(contentType);
}

/**
 * SHA-256 (hex) over the method, the path with its query string and the body. A JSON body is
 * canonicalised (RFC 8785) so that key order and whitespace do not matter; anything else,
 * including a body that claims JSON but does not parse, is hashed as raw bytes.
 */
export function fingerprint(input: FingerprintInput, options: FingerprintOptions = {}): string {
  // Canonical JSON is hashed one-shot as one string: for bodies of that size a Hash object with
  // several update() calls costs more than the hashing itself.
  const head = `${input.method.toUpperCase()}\n${input.path}\n`;
  const canonical = canonicalJsonBody(input, options.fields);
  if (canonical !== undefined) return hash('sha256', `${head}json\n${canonical}`, 'hex');
  // Without raw bytes (a framework parsed them away), the parsed value's JSON text stands in.
  if (input.parsedJson && input.body.byteLength === 0) {
    return hash('sha256', `${head}raw\n${JSON.stringify(input.parsedJson.value) ?? ''}`, 'hex');
  }
  // Raw bodies may be large: hashed in two updates rather than copied behind the prefix.
  return createHash('sha256').update(`${head}raw\n`).update(input.body).digest('hex');
}

function canonicalJsonBody(input: FingerprintInput, fields: readonly string[] | undefined): string | undefined {
  if (!input.contentType || !isJsonMediaType(input.contentType)) return undefined;
  let parsed: unknown;
  if (input.parsedJson) parsed = input.parsedJson.value;
  else {
    if (input.body.byteLength === 0) return undefined;
    try {
      parsed = JSON.parse(utf8.decode(input.body));
    } catch {
      return undefined;
    }
  }
  try {
    return canonicalJson(fields ? selectFields(parsed, fields) : parsed);
  } catch {
    // RFC 8785 has no form for a lone surrogate ("\ud800"): such a body is hashed as it came.
    return undefined;
  }
}

function selectFields(value: unknown, fields: readonly string[]): unknown[] {
  // [field] for an absent field, [field, value] for a present one: a missing field and a null
  // field are different requests, and no value can imitate absence.
  return [...fields].sort().map((field) => {
    let current: unknown = value;
    for (const part of field.split('.')) {
      current = current !== null && typeof current === 'object' ? (current as Record<string, unknown>)[part] : undefined;
    }
    return current === undefined ? [field] : [field, current];
  });
}
