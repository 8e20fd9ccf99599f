/**
 * The iterative canonical JSON writer: any depth, never throws, a form for every JS value. It is
 * what `canonicalJson` (canonical-json.ts) falls back to when its fast paths give up.
 */

import { ExactNumber } from './canonical-number.js';

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
export function writeValue(root: unknown): string {
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

/**
 * `open + parts.join(',') + close`, by concatenation: V8 then links the parts (a rope) rather than
 * copying them, where join() would copy every nested text once per level above it (quadratic in
 * the depth: 100,000 levels did not finish).
 */
export function enclose(open: string, parts: readonly string[], close: string): string {
  let out = open;
  for (let i = 0; i < parts.length; i++) out += i === 0 ? parts[i]! : ',' + parts[i]!;
  return out + close;
}
