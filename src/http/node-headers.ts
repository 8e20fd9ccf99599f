import type { IncomingMessage } from 'node:http';

/**
 * The occurrences of one request header on a Node request. `headersDistinct` builds an object of
 * every header on first use, which cost more than the rest of a replay; the joined `headers`
 * value is enough unless it holds a comma, and only then are the occurrences told apart.
 */
export function headerValues(req: IncomingMessage, name: string): string | string[] | undefined {
  const joined = req.headers[name];
  // Absent: no need for headersDistinct, which builds an object of every header.
  if (joined === undefined) return undefined;
  if (typeof joined === 'string' && !joined.includes(',')) return joined;
  return req.headersDistinct[name];
}
