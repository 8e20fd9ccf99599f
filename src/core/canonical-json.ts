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
 */

/** Deeper than this, the recursive fast path of `canonicalJson` hands over to the iterative one. */
const MAX_RECURSIVE_DEPTH = 1000;

// ---------------------------------------------------------------------------------------------
// Numbers
// ---------------------------------------------------------------------------------------------

/** An integer without fraction or exponent, short enough to be written as is (≤ 21 digits). */
const PLAIN_INTEGER = /^-?[1-9]\d{0,20}$/;
const NUMBER_PARTS = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;

/**
 * The canonical text of a JSON number token: its exact decimal value written the way ECMAScript's
 * Number::toString writes a number (RFC 8785 §3.2.2.3), applied to the token's own digits rather
 * than to the nearest double's. So:
 * - spellings of one value are one text: `1.0`, `1`, `1e0`, `10e-1` and `0.1e1` are all `1`;
 *   `-0` is `0` (as RFC 8785 writes it); `1E+2` is `100`; `1e21` is `1e+21`;
 * - every number a double holds exactly as written (which is every number a client serialised
 *   from a double, and every integer up to 2^53) gets exactly RFC 8785's text;
 * - texts of different values stay different even where their doubles are equal:
 *   `9007199254740993` ≠ `9007199254740992`, `0.10000000000000001` ≠ `0.1`, and `1e400` and
 *   `1e-400` (which a double turns into Infinity and 0) are written `1e+400` and `1e-400`.
 */
export function canonicalNumber(token: string): string {
  if (PLAIN_INTEGER.test(token)) return token;
  const parts = NUMBER_PARTS.exec(token);
  if (parts === null) throw new SyntaxError(`not a JSON number: ${token}`);
  const [, sign, whole, fraction = '', exponentText = '0'] = parts as unknown as [string, string, string, string?, string?];
  let digits = whole + fraction;
  // The value is 0.<digits> × 10^point.
  let start = 0;
  while (start < digits.length && digits.charCodeAt(start) === 48) start++;
  let end = digits.length;
  while (end > start && digits.charCodeAt(end - 1) === 48) end--;
  if (start === end) return '0';
  digits = digits.slice(start, end);
  const prefix = sign === '-' ? '-' : '';
  // An exponent of up to 15 digits (and a point shift of up to the body's length) is exact as a
  // double; a longer one is only ever written in exponent form, computed with BigInt.
  if (exponentText.replace(/^[+-]/, '').length > 15) {
    const point = BigInt(exponentText) + BigInt(whole.length - start);
    return prefix + exponentForm(digits, point - 1n);
  }
  const point = Number(exponentText) + whole.length - start;
  const k = digits.length;
  if (k <= point && point <= 21) return prefix + digits + '0'.repeat(point - k);
  if (0 < point && point <= 21) return prefix + digits.slice(0, point) + '.' + digits.slice(point);
  if (-6 < point && point <= 0) return prefix + '0.' + '0'.repeat(-point) + digits;
  return prefix + exponentForm(digits, point - 1);
}

function exponentForm(digits: string, exponent: number | bigint): string {
  const mantissa = digits.length === 1 ? digits : digits[0] + '.' + digits.slice(1);
  return `${mantissa}e${exponent < 0 ? '-' : '+'}${exponent < 0 ? -exponent : exponent}`;
}

// ---------------------------------------------------------------------------------------------
// JSON text
// ---------------------------------------------------------------------------------------------

// Sticky patterns, tested (not exec'd, which would allocate) at `lastIndex`; each is linear.
// Control characters are named in them because JSON forbids them unescaped in strings.
/* eslint-disable no-control-regex */
const PLAIN_STRING = /"[^"\\\u0000-\u001f]*"/y;
const ESCAPED_STRING = /"[^"\\\u0000-\u001f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\u0000-\u001f]*)*"/y;
/* eslint-enable no-control-regex */
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/** Reads the tokens of JSON text (RFC 8259) one at a time; the two readers below share it. */
class Lexer {
  i = 0;
  /** The decoded value of the string `string()` read last. */
  decoded = '';
  /**
   * False for a JS string with a lone surrogate in it (never one decoded from UTF-8): its strings
   * are then re-encoded one by one, so the surrogate is escaped as JSON.stringify escapes it.
   */
  private readonly wellFormed: boolean;

  constructor(readonly text: string) {
    this.wellFormed = text.isWellFormed();
  }

  /** The code unit at the next non-space position (NaN at the end). */
  peek(): number {
    const { text } = this;
    for (;;) {
      const c = text.charCodeAt(this.i);
      if (c === 32 || c === 10 || c === 13 || c === 9) this.i++;
      else return c;
    }
  }

  /** Past spaces and the expected code unit; false when something else is there. */
  expect(code: number): boolean {
    if (this.peek() !== code) return false;
    this.i++;
    return true;
  }

  /** The string token at `i` in canonical form (its value in `decoded`), or undefined. */
  string(): string | undefined {
    const { text, i } = this;
    PLAIN_STRING.lastIndex = i;
    if (PLAIN_STRING.test(text)) {
      const token = text.slice(i, (this.i = PLAIN_STRING.lastIndex));
      this.decoded = token.slice(1, -1);
      return this.wellFormed ? token : JSON.stringify(this.decoded);
    }
    ESCAPED_STRING.lastIndex = i;
    if (!ESCAPED_STRING.test(text)) return undefined;
    this.decoded = JSON.parse(text.slice(i, (this.i = ESCAPED_STRING.lastIndex))) as string;
    return JSON.stringify(this.decoded);
  }

  /** `"key":` in canonical form (the key in `decoded`), or undefined. */
  key(): string | undefined {
    if (this.peek() !== 34) return undefined;
    const quoted = this.string();
    return quoted !== undefined && this.expect(58 /* : */) ? quoted : undefined;
  }

  /** A number, string or literal at `i` (after spaces) in canonical form, or undefined. */
  scalar(c: number): string | undefined {
    const { text, i } = this;
    if (c === 34 /* " */) return this.string();
    if (c === 45 /* - */ || (c >= 48 && c <= 57)) {
      NUMBER.lastIndex = i;
      if (!NUMBER.test(text)) return undefined;
      return canonicalNumber(text.slice(i, (this.i = NUMBER.lastIndex)));
    }
    if (text.startsWith('true', i)) return ((this.i += 4), 'true');
    if (text.startsWith('false', i)) return ((this.i += 5), 'false');
    if (text.startsWith('null', i)) return ((this.i += 4), 'null');
    return undefined;
  }

  /** True when nothing but spaces is left. */
  atEnd(): boolean {
    return Number.isNaN(this.peek());
  }
}

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
 * a stretch), or an exponent of 3 digits. Digits inside strings match too; that only costs the
 * slower reader. Where it does not match, every number has at most 15 significant digits and lies
 * well inside the range of normal doubles (10^±114), so the shortest form of its double
 * (ECMAScript's, RFC 8785's) has exactly the number's own decimal value, and JSON.parse loses
 * nothing that `canonicalNumber` keeps. Written out rather than with `{14}`: irregexp scans a
 * fixed sequence several times faster (~50 ns for 200 bytes).
 */
const MAY_LOSE_DIGITS = new RegExp(`\\d${'[\\d.]'.repeat(14)}\\d|[eE][+-]?\\d\\d\\d`);

/**
 * The canonical form of JSON text (RFC 8259; the whole text must be one JSON value), numbers kept
 * exact (see `canonicalNumber`); undefined when the text is not JSON. Any depth. A key given twice
 * keeps its last value, as JSON.parse does.
 *
 * `parsed`, when given, must be JSON.parse(text): a caller that parsed the text already saves a
 * second parse whenever no number can have lost digits in it.
 */
export function canonicalJsonText(text: string, parsed?: { readonly value: unknown }): string | undefined {
  if (MAY_LOSE_DIGITS.test(text)) return readCanonicalJson(text);
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

/**
 * `open + parts.join(',') + close`, by concatenation: V8 then links the parts (a rope) rather than
 * copying them, where join() would copy every nested text once per level above it (quadratic in
 * the depth: 100,000 levels did not finish).
 */
function enclose(open: string, parts: readonly string[], close: string): string {
  let out = open;
  for (let i = 0; i < parts.length; i++) out += i === 0 ? parts[i]! : ',' + parts[i]!;
  return out + close;
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

// ---------------------------------------------------------------------------------------------
// Parsed values
// ---------------------------------------------------------------------------------------------

/**
 * A JSON number kept as its canonical text, for values built from JSON text (see
 * `parseJsonExact`); `canonicalJson` writes it as that text.
 */
export class ExactNumber {
  constructor(readonly text: string) {}

  /**
   * Present so that `canonicalJson`'s fast path (plain JSON values only) hands values holding an
   * ExactNumber to the writer that knows it. JSON.stringify writes it as a string.
   */
  toJSON(): string {
    return this.text;
  }
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

/** The canonical form of plain JSON values, not deeper than MAX_RECURSIVE_DEPTH; else throws. */
function writeRecursive(value: unknown, depth: number): string {
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
 * object's keys in UTF-16 order, no lone surrogates, no non-finite numbers, nothing with a toJSON,
 * not deeper than MAX_RECURSIVE_DEPTH.
 */
function inCanonicalOrder(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
      return value.isWellFormed();
    case 'number':
      return Number.isFinite(value);
    case 'boolean':
      return true;
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
  let previous: string | undefined;
  for (const key in record) {
    if (!Object.hasOwn(record, key)) continue;
    if ((previous !== undefined && previous >= key) || !key.isWellFormed()) return false;
    previous = key;
    if (!inCanonicalOrder(record[key], depth + 1)) return false;
  }
  return true;
}

/** What JSON.stringify leaves out: a member that is skipped, an array item written as null. */
const SKIP = Symbol('skip');
/** Marks "an array or object was just opened": nothing to hand to its parent yet. */
const OPENED = Symbol('opened');

/** An array or object being written: its entries and what has been written of them. */
interface Writing {
  readonly source: object;
  readonly array: boolean;
  /** Object keys, sorted; unused for arrays. */
  readonly keys: readonly string[];
  readonly length: number;
  readonly parts: string[];
  next: number;
}

/** The iterative writer: any depth, never throws. */
function writeValue(root: unknown): string {
  const stack: Writing[] = [];
  const onPath = new Set<object>();
  let value: unknown = root;
  let key = '';
  for (;;) {
    let written: string | typeof SKIP | typeof OPENED;
    const resolved = resolve(value, key);
    if (typeof resolved === 'string' || resolved === SKIP) written = resolved;
    else if (onPath.has(resolved.value)) written = '!cycle';
    else {
      stack.push(opening(resolved.value));
      onPath.add(resolved.value);
      written = OPENED;
    }
    for (;;) {
      const top = stack.at(-1);
      if (top === undefined) return written === SKIP || written === OPENED ? 'undefined' : written;
      if (written !== OPENED) {
        const index = top.next - 1;
        if (top.array) top.parts.push(written === SKIP ? 'null' : written);
        else if (written !== SKIP) top.parts.push(quoteString(top.keys[index]!) + ':' + written);
      }
      if (top.next < top.length) {
        const index = top.next++;
        key = top.array ? String(index) : top.keys[index]!;
        value = read(top.source, key);
        break;
      }
      stack.pop();
      onPath.delete(top.source);
      written = top.array ? enclose('[', top.parts, ']') : enclose('{', top.parts, '}');
    }
  }
}

function opening(source: object): Writing {
  const array = Array.isArray(source);
  let keys: string[] = [];
  let length = 0;
  try {
    if (array) length = (source as unknown[]).length;
    else {
      keys = Object.keys(source).sort();
      length = keys.length;
    }
  } catch {
    // A proxy that refused: written as an empty array or object.
  }
  return { source, array, keys, length, parts: [], next: 0 };
}

function read(source: object, key: string): unknown {
  try {
    return (source as Record<string, unknown>)[key];
  } catch {
    return undefined;
  }
}

/**
 * A scalar's text, SKIP for what JSON.stringify leaves out, or the object to open. `toJSON` is
 * applied first, with the member's key as JSON.stringify passes it.
 */
function resolve(value: unknown, key: string): string | typeof SKIP | { value: object } {
  if (value instanceof ExactNumber) return value.text;
  if (value !== null && (typeof value === 'object' || typeof value === 'bigint')) {
    try {
      const toJSON = (value as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === 'function') value = (toJSON as (key: string) => unknown).call(value, key);
    } catch {
      return '!toJSON';
    }
  }
  switch (typeof value) {
    case 'string':
      return quoteString(value);
    case 'number':
      return Number.isFinite(value) ? JSON.stringify(value) : String(value);
    case 'bigint':
      return `${value}n`;
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object':
      return value === null ? 'null' : { value };
    default:
      // undefined, functions and symbols.
      return SKIP;
  }
}

/** JSON.stringify's form of a string: RFC 8785's for a well-formed one, lone surrogates escaped. */
function quoteString(text: string): string {
  return JSON.stringify(text);
}
