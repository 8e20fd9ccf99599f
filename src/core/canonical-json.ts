/**
 * Canonical JSON for the request fingerprint: the RFC 8785 (JCS) form, object keys sorted by UTF-16
 * code units, no whitespace, strings in ECMAScript's JSON form, with one deliberate difference for
 * numbers (see `canonicalNumber`): a number is written from the exact decimal value of its text, so
 * two numbers that a double cannot tell apart (9007199254740993 and 9007199254740992) stay apart.
 *
 * Two entry points:
 * - `canonicalJsonText(text)` for JSON text: any depth, every number's exact value; undefined when
 *   the text is not JSON. Text in which no number can have more digits than a double holds (nearly
 *   all) goes through JSON.parse and `canonicalJson`, the rest through a reader of its own.
 * - `canonicalJson(value)` encodes a value a framework's parser already produced. It never throws:
 *   any depth, BigInt (`1n`, tagged so that it differs from the number 1), NaN and ±Infinity
 *   (written as their names), lone surrogates (escaped, as JSON.stringify does), cycles, and
 *   anything else JSON.stringify would skip or call `toJSON` on.
 *
 * Written here rather than taken from `canonicalize` because the fingerprint runs on every
 * protected request and this is several times faster on typical bodies.
 *
 * This file keeps the entry points, the fast path (`inCanonicalOrder`) and the recursive writer;
 * numbers are in canonical-number.ts, the reader of JSON text in json-lexer.ts and json-read.ts,
 * the iterative writer in canonical-writer.ts. Their public names are exported from here too.
 */

import { writeValue } from './canonical-writer.js';
import { MAY_LOSE_DIGITS, readCanonicalJson } from './json-read.js';

export { canonicalNumber, ExactNumber } from './canonical-number.js';
export { parseJsonExact, parseJsonKeepingDigits, readCanonicalJson } from './json-read.js';

/**
 * Deno 2.9's JSON.parse (V8 15.0) keeps the first of two equal keys where one is escaped, when a
 * later key holds an escape too, and not always the same one from one parse to the next:
 * `JSON.parse('{"\\u0061":"x","\\u0061":[1],"\\\\":{"a":"y"}}').a` is "x" or [1] there, [1] on Node
 * and Bun. A fingerprint must not depend on that, so on Deno a text with any escape is read by the
 * exact reader, which keeps the last of equal keys as RFC 8785 and JSON.parse elsewhere do.
 */
const ESCAPED_KEYS_UNSAFE = typeof (globalThis as { readonly Deno?: unknown }).Deno === 'object';

/** Deeper than this, the recursive fast path of `canonicalJson` hands over to the iterative one. */
const MAX_RECURSIVE_DEPTH = 1000;

/**
 * The canonical form of JSON text (RFC 8259; the whole text must be one JSON value), numbers kept
 * exact (see `canonicalNumber`); undefined when the text is not JSON. Any depth. A key given twice
 * keeps its last value, as JSON.parse does.
 *
 * `parsed`, when given, must be JSON.parse(text): a caller that parsed the text already saves a
 * second parse whenever no number can have lost digits in it.
 */
export function canonicalJsonText(text: string, parsed?: { readonly value: unknown }): string | undefined {
  if (MAY_LOSE_DIGITS.test(text) || (ESCAPED_KEYS_UNSAFE && text.includes('\\'))) return readCanonicalJson(text);
  // The common case: the engine's JSON.parse and the canonical writer are faster than reading
  // the text in JS, and give the same text (test/core/canonical-json.test.ts compares them).
  let value: unknown;
  if (parsed !== undefined) value = parsed.value;
  else {
    try {
      value = JSON.parse(text);
    } catch {
      return undefined;
    }
  }
  return canonicalJson(value);
}

/**
 * The canonical form of a value a JSON parser produced (or anything else): RFC 8785 for what
 * JSON.parse can produce, with numbers in ECMAScript's form (which is `canonicalNumber`'s for the
 * double's own value). Never throws. Beyond JSON:
 * - BigInt `1n` is written `1n`, NaN and ±Infinity as `NaN`, `Infinity`, `-Infinity`: none of them
 *   JSON, so none equals a JSON value's form;
 * - a string with a lone surrogate is written with it escaped (`"\ud800"`), as JSON.stringify
 *   does; a well-formed string never has that form, since RFC 8785 writes non-ASCII characters as is;
 * - `toJSON` is called, and members that are undefined, functions or symbols are skipped (array
 *   items become null), as JSON.stringify does; such a value on its own is written `undefined`; a
 *   `toJSON` that throws is written `!toJSON`;
 * - an object met again inside itself (a cycle) is written `!cycle`;
 * - an `ExactNumber` is written as its text.
 */
export function canonicalJson(value: unknown): string {
  try {
    // Most bodies have their keys in order already (clients serialise the same struct every
    // time); then the canonical form is exactly JSON.stringify's text, which the engine writes
    // faster than any JS walk. Otherwise a recursive walk, which is faster than the iterative one.
    if (inCanonicalOrder(value, 0)) return JSON.stringify(value);
    return writeRecursive(value, 0);
  } catch {
    // Something unusual (BigInt, NaN, too deep, a cycle, a getter or toJSON that threw): the
    // iterative writer, which has a form for everything.
    return writeValue(value);
  }
}

/** Thrown by `writeRecursive` for what it leaves to the iterative writer. */
const UNUSUAL = new Error('canonical JSON: left to the iterative writer');

/**
 * The canonical form of plain JSON values (members JSON.stringify skips are skipped here too), not
 * deeper than MAX_RECURSIVE_DEPTH; else throws. Exported for its tests, not from the package.
 */
export function writeRecursive(value: unknown, depth: number): string {
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw UNUSUAL;
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object':
      break;
    default:
      throw UNUSUAL;
  }
  if (value === null) return 'null';
  if (depth > MAX_RECURSIVE_DEPTH || typeof (value as { toJSON?: unknown }).toJSON === 'function') throw UNUSUAL;
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i];
      if (i > 0) out += ',';
      out += item === undefined || typeof item === 'symbol' || typeof item === 'function' ? 'null' : writeRecursive(item, depth + 1);
    }
    return out + ']';
  }
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  let out = '{';
  let first = true;
  for (const key of keys) {
    const item = record[key];
    if (item === undefined || typeof item === 'symbol' || typeof item === 'function') continue;
    if (!first) out += ',';
    first = false;
    out += JSON.stringify(key) + ':' + writeRecursive(item, depth + 1);
  }
  return out + '}';
}

/**
 * True when JSON.stringify(value) is already the canonical text: plain JSON values only, every
 * object's keys in UTF-16 order, no non-finite numbers, nothing with a toJSON, not deeper than
 * MAX_RECURSIVE_DEPTH. Lone surrogates need no check: every writer escapes them as JSON.stringify
 * does. Exported for its tests (test/core/canonical-json.test.ts), not from the package.
 */
export function inCanonicalOrder(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object':
      break;
    default:
      return false;
  }
  if (value === null) return true;
  if (depth > MAX_RECURSIVE_DEPTH || typeof (value as { toJSON?: unknown }).toJSON === 'function') return false;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      if (!inCanonicalOrder(value[i], depth + 1)) return false;
    }
    return true;
  }
  const record = value as Record<string, unknown>;
  // No key sorts before '', and an object's own keys are distinct: `>` is the whole check.
  let previous = '';
  for (const key in record) {
    if (!Object.hasOwn(record, key)) continue;
    if (previous > key) return false;
    previous = key;
    if (!inCanonicalOrder(record[key], depth + 1)) return false;
  }
  return true;
}
