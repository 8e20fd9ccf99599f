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
  // Most bodies have their keys in order already (clients serialise the same struct every time);
  // then JCS is exactly JSON.stringify's text, which the engine writes faster than any JS walk.
  if (inCanonicalOrder(value, 0)) return JSON.stringify(value) as string;
  return write(value, 0);
}

/**
 * True when JSON.stringify(value) is already the JCS text: every object's keys in UTF-16 order,
 * no lone surrogates, no non-finite numbers, nothing with a toJSON. False means "use write()",
 * which also throws where JCS has no form.
 */
function inCanonicalOrder(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
      return value.isWellFormed();
    case 'number':
      return Number.isFinite(value);
    case 'boolean':
    case 'undefined':
      return true;
    case 'object':
      break;
    default:
      return false;
  }
  if (value === null) return true;
  if (depth > MAX_DEPTH || typeof (value as { toJSON?: unknown }).toJSON === 'function') return false;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i];
      if (typeof item !== 'function' && typeof item !== 'symbol' && !inCanonicalOrder(item, depth + 1)) return false;
    }
    return true;
  }
  const record = value as Record<string, unknown>;
  let previous: string | undefined;
  for (const key in record) {
    if (!Object.hasOwn(record, key)) continue;
    if ((previous !== undefined && previous >= key) || !key.isWellFormed()) return false;
    previous = key;
    const item = record[key];
    if (typeof item !== 'function' && typeof item !== 'symbol' && !inCanonicalOrder(item, depth + 1)) return false;
  }
  return true;
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
