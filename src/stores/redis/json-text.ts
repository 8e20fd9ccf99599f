/**
 * JSON.stringify's text of the few values the Redis store writes on every request (strings, and
 * lists of them), built by concatenation when no character needs escaping. The text is the same
 * either way, byte for byte (record keys are hashed from it): each JSON.stringify call costs more
 * than the text it writes here (docs/performance.md).
 */

// What JSON.stringify escapes: control characters, quote and backslash; and a surrogate, which
// may be a lone one (escaped too): all of them are left to it.
// eslint-disable-next-line no-control-regex -- control characters are what it looks for
const ESCAPED = /["\\\u0000-\u001f\ud800-\udfff]/;

/** `JSON.stringify(text)`. */
export function jsonString(text: string): string {
  return ESCAPED.test(text) ? JSON.stringify(text) : `"${text}"`;
}

/** `JSON.stringify(pairs)` of name/value pairs, such as a response's headers. */
export function jsonPairs(pairs: ReadonlyArray<readonly [string, string]>): string {
  let out = '[';
  for (let i = 0; i < pairs.length; i++) {
    const pair = pairs[i]!;
    if (pair.length !== 2 || typeof pair[0] !== 'string' || typeof pair[1] !== 'string') return JSON.stringify(pairs);
    out += `${i === 0 ? '' : ','}[${jsonString(pair[0])},${jsonString(pair[1])}]`;
  }
  return `${out}]`;
}
