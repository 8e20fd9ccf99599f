/**
 * What the `idemkit` commands print to a terminal. In the store commands and `idemkit ui`, keys,
 * scopes, recovery points, stored headers and bodies are chosen by clients (and error messages
 * may echo them); in `idemkit check`, the bodies and headers it reports come from the target,
 * which may be broken or hostile. A raw ESC, BEL or C1 control would let such a value retitle the
 * operator's terminal (`ESC]0;…BEL`), erase and fake lines (`ESC[2K ESC[1A`) or write the
 * clipboard (OSC 52). Every human-readable line goes through `printable` (one field) or
 * `terminalText` (whole lines), and every JSON document through `terminalJson`, which stays
 * valid JSON with the same value.
 */

// C0, DEL, C1 (\p{Cc}); lone surrogates (\p{Cs}: with the u flag a surrogate pair is one code
// point and does not match); U+2028/U+2029; and the bidirectional controls, which reorder what
// the terminal shows (a key that reads differently from what it is).
const UNSAFE = /[\p{Cc}\p{Cs}\u2028\u2029\p{Bidi_Control}]/gu;
// The same but newline: for whole lines, whose fields were made printable already.
const UNSAFE_BUT_NEWLINE = /[^\P{Cc}\n]|[\p{Cs}\u2028\u2029\p{Bidi_Control}]/gu;
// What JSON.stringify leaves raw inside strings (it escapes C0 and lone surrogates already).
const UNSAFE_IN_JSON = /[\x7f-\x9f\u2028\u2029\p{Bidi_Control}]/gu;

const SHORT: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

function escape(c: string): string {
  const short = SHORT[c];
  if (short !== undefined) return short;
  const code = c.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
}

/** One field for a terminal: control, line-separator and bidi characters as `\x1b`, `\n`, `\u202e`. */
export function printable(text: string): string {
  return text.replace(UNSAFE, escape);
}

/** A JSON string literal (as `JSON.stringify`), with nothing in it a terminal acts on. */
export function quoted(text: string): string {
  return printable(JSON.stringify(text));
}

/** Whole lines for a terminal: as `printable`, keeping the newlines between them. */
export function terminalText(text: string): string {
  return text.replace(UNSAFE_BUT_NEWLINE, escape);
}

/**
 * `JSON.stringify(value, null, indent)` with DEL, C1, U+2028/U+2029 and the bidi controls written
 * as `\uXXXX`: the same JSON value, safe on a terminal. (Those characters occur only inside
 * strings in JSON.stringify's output, so the escapes always land in a string.)
 */
export function terminalJson(value: unknown, indent?: number): string {
  return JSON.stringify(value, null, indent).replace(UNSAFE_IN_JSON, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
