/**
 * Attribute values that must neither leak nor vary: scopes and keys on spans are hashes unless
 * asked otherwise, and an error is named by its stable code.
 */
import { createHash } from 'node:crypto';
import { redactedKey } from '../core/events.js';

/**
 * Hashes of scopes already seen. Scopes are tenants, few and repeated on every span, so a hash is
 * computed once per tenant, not once per store call; bounded, since a scope comes from a request.
 */
const scopeHashes = new Map<string, string>();
const SCOPE_HASHES_MAX = 10_000;

/**
 * What `idemkit.scope` says of a scope: `sha256:` + 32 hex of it (stable, so spans still group by
 * tenant), or the scope as it is when asked. The scope is stored and shown to operators, and
 * should be a tenant id; a hook that returns a credential anyway must not put it in every trace.
 */
export function scopeValue(scope: string, raw: boolean): string {
  if (raw) return scope;
  let hash = scopeHashes.get(scope);
  if (hash === undefined) {
    hash = `sha256:${createHash('sha256').update(scope).digest('hex').slice(0, 32)}`;
    if (scopeHashes.size >= SCOPE_HASHES_MAX) scopeHashes.clear();
    scopeHashes.set(scope, hash);
  }
  return hash;
}

/** What the adapter's `redactKeys` makes of a key: `sha256:` + 32 hex. */
const REDACTED_KEY = /^sha256:[0-9a-f]{32}$/;

/**
 * What `idemkit.key` says of a request's key: always its hash of scope and key, `redactedKey`
 * (the value the adapter's events and logs carry with `redactKeys`, so a span, an event and a log
 * line of one request match). An event's key is already that hash under `redactKeys`: it is kept,
 * not hashed twice. (A client key that merely looks like one, with `redactKeys` off, is kept too:
 * it is then 32 hex digits the client chose, which tell nothing a hash would hide.)
 */
export function keyValue(scope: string, key: string): string {
  return REDACTED_KEY.test(key) ? key : redactedKey(scope, key);
}

/** What `error.type` says of an error: idemkit's stable code, else the class name. */
export function errorType(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code !== '') return code;
  if (error instanceof Error) return error.name;
  return '_OTHER';
}
