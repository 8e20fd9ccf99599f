// What the list and the record views (pages and API alike) read from a query string: a filter or a
// record's scope and key, or a message saying what is wrong with them.
import type { RecordFilter, RecordState } from '../../core/store.js';
import { parseDuration, parseWholeNumber } from '../../check/flags.js';

/** The most records one list page shows (`limit=` above it is lowered to it). */
export const MAX_LIST_LIMIT = 1000;
export const DEFAULT_LIST_LIMIT = 100;

/** The list's filter from the query string, or a message saying what is wrong with it. */
export function readFilter(q: URLSearchParams): (RecordFilter & { limit: number }) | string {
  const state = q.get('state') || undefined;
  if (state !== undefined && state !== 'in_flight' && state !== 'completed') return `state: expected in_flight or completed, got ${JSON.stringify(state)}`;
  const olderRaw = q.get('older') || undefined;
  let olderThanMs: number | undefined;
  if (olderRaw !== undefined) {
    const ms = parseDuration(olderRaw, 's');
    if (ms === undefined) return `older than: expected a duration like 30s, 5m, 2h or 1d, got ${JSON.stringify(olderRaw)}`;
    olderThanMs = Math.round(ms);
  }
  const limitRaw = q.get('limit') || undefined;
  let limit = DEFAULT_LIST_LIMIT;
  if (limitRaw !== undefined) {
    const n = parseWholeNumber(limitRaw);
    if (n === undefined || n < 1) return `limit: expected a whole number >= 1, got ${JSON.stringify(limitRaw)}`;
    limit = Math.min(n, MAX_LIST_LIMIT);
  }
  // An empty scope field is every scope (the form always sends the field).
  const scope = q.get('scope') || undefined;
  return { state: state as RecordState | undefined, scope, olderThanMs, limit };
}

export function readRef(q: URLSearchParams): { scope: string; key: string } | string {
  const scope = q.get('scope');
  const key = q.get('key');
  if (scope === null || key === null) return 'scope and key are required: /record?scope=S&key=K';
  return { scope, key };
}
