/**
 * Reading JSON text by its own digits (see canonical-json.ts): straight to canonical text
 * (`readCanonicalJson`) or to a value whose numbers keep their digits (`parseJsonExact`), and the
 * check that decides when JSON.parse would lose none (`MAY_LOSE_DIGITS`).
 */

import { ExactNumber } from './canonical-number.js';
import { enclose } from './canonical-writer.js';
import { Lexer } from './json-lexer.js';

/** One open array or object while reading JSON text. */
interface Open {
  readonly object: boolean;
  /** Array items, or object members as `"key":value`, in canonical form. */
  readonly texts: string[];
  /** Object keys (decoded), parallel to `texts`. */
  readonly keys: string[];
  /** False once a key arrived that is not greater than the one before (unsorted or repeated). */
  inOrder: boolean;
  /** The quoted canonical form of the key whose value is being read. */
  quotedKey: string;
}

/**
 * Where a number of the text might have more digits than a double holds: 16 digits or more (16
 * characters that are digits or `.`, from a digit to a digit: every mantissa of 16 digits has such
 * a stretch), or an exponent of 3 digits on a number (the lookbehind, tried only after an `e` and
 * 3 digits matched, asks for a number token back to a `:`, `,`, `[`, whitespace or the start: an
 * id in a string such as `"cus_8e03978e"` is no number). Digits inside strings may still match;
 * that only costs the slower reader. Where it does not match, every number has at most 15
 * significant digits and lies well inside the range of normal doubles (10^±114), so the shortest
 * form of its double (ECMAScript's, RFC 8785's) has exactly the number's own decimal value, and
 * JSON.parse loses nothing that `canonicalNumber` keeps. Written out rather than with `{14}`:
 * irregexp scans a fixed sequence several times faster (~50 ns for 200 bytes).
 */
export const MAY_LOSE_DIGITS = new RegExp(`\\d${'[\\d.]'.repeat(14)}\\d|[eE][+-]?\\d\\d\\d(?<=(?:^|[\\s:,[])-?\\d+(?:\\.\\d+)?[eE][+-]?\\d+)`);

/**
 * `canonicalJsonText` by reading the text in JS, iteratively (so any depth is read without
 * recursion), each number by its own digits.
 */
export function readCanonicalJson(text: string): string | undefined {
  const lexer = new Lexer(text);
  const stack: Open[] = [];
  for (;;) {
    // Read one value, or open an array or object (then go on with its first entry).
    let value: string | undefined;
    const c = lexer.peek();
    if (c === 123 /* { */ || c === 91 /* [ */) {
      lexer.i++;
      const object = c === 123;
      if (lexer.expect(object ? 125 : 93)) value = object ? '{}' : '[]';
      else {
        const open: Open = { object, texts: [], keys: [], inOrder: true, quotedKey: '' };
        if (object) {
          const quoted = lexer.key();
          if (quoted === undefined) return undefined;
          open.quotedKey = quoted;
          open.keys.push(lexer.decoded);
        }
        stack.push(open);
        continue;
      }
    } else value = lexer.scalar(c);
    if (value === undefined) return undefined;

    // Hand the value to the array or object it belongs to; close those that end here.
    for (;;) {
      const open = stack.at(-1);
      if (open === undefined) return lexer.atEnd() ? value : undefined;
      open.texts.push(open.object ? open.quotedKey + ':' + value : value);
      const next = lexer.peek();
      lexer.i++;
      if (next === 44 /* , */) {
        if (open.object) {
          const quoted = lexer.key();
          if (quoted === undefined) return undefined;
          const { keys } = open;
          if (open.inOrder && !(keys[keys.length - 1]! < lexer.decoded)) open.inOrder = false;
          keys.push(lexer.decoded);
          open.quotedKey = quoted;
        }
        break;
      }
      if (next !== (open.object ? 125 /* } */ : 93 /* ] */)) return undefined;
      stack.pop();
      value = open.object ? enclose('{', membersInOrder(open), '}') : enclose('[', open.texts, ']');
    }
  }
}

/** An object's members sorted by key (UTF-16 code units); of a repeated key, the last one. */
function membersInOrder(open: Open): string[] {
  if (open.inOrder) return open.texts;
  const { keys, texts } = open;
  const order = keys.map((_, index) => index);
  // Members with one key stay in the order they came, so of those the last is the one kept.
  order.sort((a, b) => (keys[a]! < keys[b]! ? -1 : keys[a]! > keys[b]! ? 1 : a - b));
  const out: string[] = [];
  for (let n = 0; n < order.length; n++) {
    const index = order[n]!;
    const following = order[n + 1];
    if (following !== undefined && keys[following] === keys[index]) continue;
    out.push(texts[index]!);
  }
  return out;
}

/**
 * JSON text as a value for `canonicalJson` that has every number's digits: JSON.parse's value (or
 * `parsed`, which must be that) where no number can have lost digits, else `parseJsonExact`'s.
 * Undefined when the text is not JSON.
 */
export function parseJsonKeepingDigits(text: string, parsed?: { readonly value: unknown }): { value: unknown } | undefined {
  if (MAY_LOSE_DIGITS.test(text)) return parseJsonExact(text);
  if (parsed !== undefined) return { value: parsed.value };
  try {
    return { value: JSON.parse(text) as unknown };
  } catch {
    return undefined;
  }
}

/**
 * JSON text as a value whose numbers are `ExactNumber`s (their canonical text) and whose objects
 * have no prototype (so a `__proto__` key is a member like any other); undefined when the text is
 * not JSON. Iterative. For choosing fields (`fingerprintFields`) without losing numbers' digits.
 */
export function parseJsonExact(text: string): { value: unknown } | undefined {
  const lexer = new Lexer(text);
  type Container = { array: unknown[]; object?: undefined } | { object: Record<string, unknown>; key: string; array?: undefined };
  const stack: Container[] = [];
  for (;;) {
    let value: unknown;
    const c = lexer.peek();
    if (c === 123 || c === 91) {
      lexer.i++;
      if (c === 91) {
        if (lexer.expect(93)) value = [];
        else {
          stack.push({ array: [] });
          continue;
        }
      } else if (lexer.expect(125)) value = Object.create(null);
      else {
        if (lexer.key() === undefined) return undefined;
        stack.push({ object: Object.create(null) as Record<string, unknown>, key: lexer.decoded });
        continue;
      }
    } else {
      const scalar = lexer.scalar(c);
      if (scalar === undefined) return undefined;
      value = c === 34 ? lexer.decoded : c === 116 ? true : c === 102 ? false : c === 110 ? null : new ExactNumber(scalar);
    }
    for (;;) {
      const open = stack.at(-1);
      if (open === undefined) return lexer.atEnd() ? { value } : undefined;
      if (open.array) open.array.push(value);
      else open.object[open.key] = value;
      const next = lexer.peek();
      lexer.i++;
      if (next === 44) {
        if (open.object) {
          if (lexer.key() === undefined) return undefined;
          open.key = lexer.decoded;
        }
        break;
      }
      if (next !== (open.array ? 93 : 125)) return undefined;
      stack.pop();
      value = open.array ?? open.object;
    }
  }
}
