/**
 * Scopes idemkit writes for itself, kept apart from the scopes of HTTP requests.
 *
 * One store may serve an HTTP app and consume-once messaging at the same time, and both address
 * records by (scope, key). HTTP scopes come from the application's `scope` hook (a tenant or
 * account id); a consumer's records must never share one of them, or a tenant whose scope happens
 * to equal a consumer's could claim an event id first and make every delivery of that event fail
 * (or the reverse). So every scope idemkit uses internally starts with RESERVED_SCOPE_MARK, and
 * the HTTP engine refuses a scope hook's answer that starts with it (`isReservedScope`): the two
 * sets of scopes are disjoint by construction, whatever names tenants and consumers have.
 *
 * Why U+001F (INFORMATION SEPARATOR ONE) and not a readable prefix such as `idemkit:`: a tenant
 * id may be any text, so any printable prefix could be a real tenant's; a control character is
 * never part of an HTTP header value (RFC 9110 excludes them; Node refuses them), a URL or a
 * sensible account id, so refusing it costs no real application anything. It is also kept
 * byte-exact by every store: not U+0000, which PostgreSQL `text` refuses, and not a surrogate,
 * which is not well-formed text; one byte in UTF-8 (MySQL bounds a scope in bytes).
 */

/** The first character of every scope idemkit reserves for itself. */
export const RESERVED_SCOPE_MARK = '\u001f';

/** The internal namespaces; one per feature that keeps records in a shared store. */
export type InternalNamespace = 'message' | 'instance';

/**
 * True for a scope in idemkit's reserved namespace. The HTTP engine must refuse such a scope
 * from the application's `scope` hook, so no request can address an internal record.
 */
export function isReservedScope(scope: string): boolean {
  return scope.startsWith(RESERVED_SCOPE_MARK);
}

/**
 * The scope of an internal namespace's records for one name (a consumer):
 * `\u001fidemkit:<namespace>:<name>`. Distinct namespaces never share a scope: the namespace is
 * a fixed word without `:`, followed by `:`.
 */
export function internalScope(namespace: InternalNamespace, name: string): string {
  return `${RESERVED_SCOPE_MARK}idemkit:${namespace}:${name}`;
}
