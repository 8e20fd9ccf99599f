import { randomUUID } from 'node:crypto';

let counter = 0;

/**
 * Renders a body template: `{{uuid}}` is a fresh UUID, `{{n}}` a counter and `{{key}}` the
 * request's idempotency key, so two renderings differ when the template asks for it.
 */
export function render(template: string, key = ''): string {
  return template.replace(/\{\{\s*(uuid|n|key)\s*\}\}/g, (_match, name: string) => {
    if (name === 'uuid') return randomUUID();
    if (name === 'n') return String(++counter);
    return key;
  });
}

/**
 * A body that differs from `body` for any fingerprint: a JSON object gets one extra field (a
 * changed value, not whitespace, which canonical JSON would ignore); anything else gets a suffix.
 */
export function differentBody(template: string, body: string, key = ''): string {
  const other = render(template, key);
  if (other !== body && !sameJson(other, body)) return other;
  try {
    const value: unknown = JSON.parse(body);
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      return JSON.stringify({ ...value, idemkit_check_variant: randomUUID() });
    }
  } catch {
    // not JSON: fall through
  }
  return `${body}-${randomUUID()}`;
}

/** True when both parse as JSON and are deeply equal (key order ignored). */
export function sameJson(a: string, b: string): boolean {
  try {
    return canonical(JSON.parse(a)) === canonical(JSON.parse(b));
  } catch {
    return false;
  }
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** A new high-entropy key (a UUID: 122 random bits, and a valid bare token and sf-string). */
export const freshKey = (): string => randomUUID();
