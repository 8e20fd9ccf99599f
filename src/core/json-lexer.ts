/** The tokens of JSON text (RFC 8259), read one at a time for the readers of json-read.ts. */

import { canonicalNumber } from './canonical-number.js';

// Sticky patterns, tested (not exec'd, which would allocate) at `lastIndex`; each is linear.
// Control characters are named in them because JSON forbids them unescaped in strings.
/* eslint-disable no-control-regex */
const PLAIN_STRING = /"[^"\\\u0000-\u001f]*"/y;
const ESCAPED_STRING = /"[^"\\\u0000-\u001f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\u0000-\u001f]*)*"/y;
/* eslint-enable no-control-regex */
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/** Reads the tokens of JSON text (RFC 8259) one at a time; the two readers of json-read.ts share it. */
export class Lexer {
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
