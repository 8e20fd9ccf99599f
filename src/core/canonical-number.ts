/**
 * Numbers in canonical JSON (see canonical-json.ts): a JSON number token written from its exact
 * decimal value, and `ExactNumber`, the value that carries such a text through a parsed value.
 */

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
  // An exponent of up to 15 significant digits (and a point shift of up to the body's length) is
  // exact as a double; a longer one is only ever written in exponent form, computed with BigInt.
  // Its leading zeros do not count: `1e0000000000000000` is `1`, as `1e0` is.
  if (exponentText.replace(/^[+-]?0*/, '').length > 15) {
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
