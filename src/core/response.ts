import type { StoredResponse } from './store.js';

/** Set on every replayed response (draft-07, Stripe). */
export const REPLAYED_HEADER = 'idempotent-replayed';
/** Set on a replay whose body exceeded the store's limit and was not kept. */
export const BODY_OMITTED_HEADER = 'idempotent-body-omitted';

/**
 * Headers that describe the handler's representation besides the replayed ones: dropped, with
 * those, when a problem answer replaces the handler's.
 */
export const REPRESENTATION_HEADERS: readonly string[] = ['set-cookie', 'content-length', 'content-encoding'];

const NULL_BODY_STATUSES: ReadonlySet<number> = new Set([101, 103, 204, 205, 304]);

/** Statuses whose responses never carry a body (HTTP semantics; WHATWG Response refuses one). */
export function isNullBodyStatus(status: number): boolean {
  return NULL_BODY_STATUSES.has(status);
}

type HeaderValue = string | number | readonly string[] | undefined;

/** A response's headers as adapters have them: a fetch `Headers` or entries, or a Node-style record. */
export type ResponseHeaders = Iterable<readonly [string, HeaderValue]> | Readonly<Record<string, HeaderValue>>;

/** Builds the record of a response, keeping only allowlisted headers (never Set-Cookie). */
export function toStoredResponse(
  status: number,
  headers: Iterable<readonly [string, HeaderValue]>,
  body: Uint8Array,
  allow: ReadonlySet<string>,
): StoredResponse {
  const kept: Array<readonly [string, string]> = [];
  for (const [name, value] of headers) keep(kept, name, value, allow);
  return { status, headers: kept, body, bodyOmitted: false };
}

/** `toStoredResponse` for a Node-style header object (`res.getHeaders()`), without an entries array. */
export function toStoredResponseFromRecord(
  status: number,
  headers: Readonly<Record<string, HeaderValue>>,
  body: Uint8Array,
  allow: ReadonlySet<string>,
): StoredResponse {
  const kept: Array<readonly [string, string]> = [];
  for (const name in headers) keep(kept, name, headers[name], allow);
  return { status, headers: kept, body, bodyOmitted: false };
}

function keep(kept: Array<readonly [string, string]>, rawName: string, value: HeaderValue, allow: ReadonlySet<string>): void {
  if (value === undefined) return;
  // Node keeps header names in lower case already: most are found without lower-casing them.
  let name = rawName;
  if (!allow.has(name)) {
    name = rawName.toLowerCase();
    if (name === rawName || !allow.has(name)) return;
  }
  if (Array.isArray(value)) for (const v of value as readonly string[]) kept.push([name, v]);
  else kept.push([name, String(value)]);
}

/** The headers of a replay: the stored ones plus the replay markers. */
export function replayHeaderList(response: StoredResponse): Array<readonly [string, string]> {
  const list: Array<readonly [string, string]> = [...response.headers, [REPLAYED_HEADER, 'true']];
  if (response.bodyOmitted) list.push([BODY_OMITTED_HEADER, 'true']);
  return list;
}

/** The replay headers as a name → value(s) record, for Node-style `setHeader` APIs. */
export function replayHeaderRecord(response: StoredResponse): Record<string, string | string[]> {
  const grouped: Record<string, string | string[]> = {};
  for (const [name, value] of response.headers) {
    const existing = grouped[name];
    grouped[name] = existing === undefined ? value : typeof existing === 'string' ? [existing, value] : [...existing, value];
  }
  grouped[REPLAYED_HEADER] = 'true';
  if (response.bodyOmitted) grouped[BODY_OMITTED_HEADER] = 'true';
  return grouped;
}

/** The bytes of a replay body: empty when it was omitted. */
export function replayBody(response: StoredResponse): Uint8Array {
  return response.body ?? new Uint8Array(0);
}
