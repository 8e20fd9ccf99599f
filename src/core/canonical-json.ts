/**
 * RFC 8785 (JCS) canonical JSON for values that came out of a JSON parser: object keys sorted by
 * UTF-16 code units, no whitespace, strings and numbers in ECMAScript's JSON form (which is what
 * JCS specifies). Written here rather than taken from `canonicalize` because the fingerprint runs
 * on every protected request and this is about four times faster on typical bodies.
 *
 * Throws, as `canonicalize` does, for what JCS has no form for: lone surrogates, NaN and
 * ±Infinity (a parsed `1e400`), and for cycles (too deep to be a parsed body).
 */
const MAX_DEPTH = 1000;

export function canonicalJson(value: unknown): string {
  return write(value, 0);
}

function write(value: unknown, depth: number): string {
  switch (typeof value) {
    case 'string':
      return quote(value);
    case 'number':
      if (!Number.isFinite(value)) throw new RangeError(`canonical JSON has no form for ${value}`);
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'bigint':
      throw new TypeError('canonical JSON has no form for a BigInt');
    case 'object':
      break;
    default:
      // undefined, functions and symbols: JSON.stringify's answer at the top level.
      return JSON.stringify(value) as string;
  }
  if (value === null) return 'null';
  if (depth > MAX_DEPTH) throw new RangeError('canonical JSON: nested too deep (or circular)');
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return write(toJSON.call(value), depth + 1);
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i];
      if (i > 0) out += ',';
      out += item === undefined || typeof item === 'symbol' || typeof item === 'function' ? 'null' : write(item, depth + 1);
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
    out += quote(key) + ':' + write(item, depth + 1);
  }
  return out + '}';
}

function quote(text: string): string {
  if (!text.isWellFormed()) throw new RangeError('canonical JSON has no form for a lone surrogate');
  return JSON.stringify(text);
}
