/**
 * The checks every store's decoder applies to a stored response before it is replayed. A response
 * was captured from a real one, so a status or header that no HTTP response can have means the
 * record is corrupt: replaying it would answer a retry with nonsense, or crash the adapter
 * (Node's `writeHead(0)` and `setHeader('a b', …)` throw).
 */

/** An RFC 9110 token: what a header name is made of. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** What a header value may hold, as Node's http module checks it (WHATWG Headers takes the same). */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** True for an HTTP status code a response can be answered with (100 to 999, as Node's writeHead takes). */
export function isHttpStatus(status: unknown): status is number {
  return typeof status === 'number' && Number.isInteger(status) && status >= 100 && status <= 999;
}

/** Why a stored status cannot be replayed, or undefined when it is an HTTP status code. */
export function statusProblem(status: unknown): string | undefined {
  return isHttpStatus(status) ? undefined : 'status is not an HTTP status code';
}

/** Why stored headers (the decoded JSON) cannot be replayed, or undefined for a list of valid [name, value] pairs. */
export function headersProblem(headers: unknown): string | undefined {
  if (!Array.isArray(headers)) return 'headers is not a list of [name, value] pairs';
  for (const pair of headers as unknown[]) {
    if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== 'string' || typeof pair[1] !== 'string') {
      return 'headers is not a list of [name, value] pairs';
    }
    if (!TOKEN.test(pair[0])) return `the header name ${JSON.stringify(pair[0])} is not an HTTP token`;
    if (!FIELD_VALUE.test(pair[1])) return `the value of header ${JSON.stringify(pair[0])} has characters HTTP forbids`;
  }
  return undefined;
}
