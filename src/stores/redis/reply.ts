/**
 * The Redis store's replies, read back: a record's fields as the scripts return them, each
 * checked, a stored response checked before it is replayed; and the error that names a record
 * that cannot be read.
 */
import { CorruptRecordError } from '../../core/errors.js';
import type { RecordRef, StoredResponse } from '../../core/store.js';
import { headersProblem, isHttpStatus } from '../shared/stored-response.js';

export const WRONG_TYPE = 'the key does not hold a string (records are strings; a hash is from an earlier idemkit)';

/** A record that cannot be read names its Redis key and its (scope, key), so it can be found and fixed. */
export function corrupt(redisKey: string, ref: RecordRef | undefined, reason: string): CorruptRecordError {
  const which = ref ? ` (scope ${JSON.stringify(ref.scope)}, key ${JSON.stringify(ref.key)})` : '';
  return new CorruptRecordError(
    `redis store: the record at Redis key "${redisKey}"${which} cannot be parsed: ${reason}. ` +
      'Inspect it with GET (docs/stores/redis.md shows how to decode it); deleting it makes the key new again.',
  );
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export function text(value: unknown): string | undefined {
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return typeof value === 'string' ? value : undefined;
}

export type Corrupt = (reason: string) => CorruptRecordError;

export function parseInteger(value: unknown, field: string, at: Corrupt): number {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  const s = text(value);
  if (s === undefined || !/^\d{1,16}$/.test(s)) throw at(`${field} is not an integer`);
  return Number(s);
}

export function parseJson(value: unknown, field: string, at: Corrupt): unknown {
  try {
    return JSON.parse(text(value) ?? '');
  } catch {
    throw at(`${field} is not JSON`);
  }
}

/** [status, headers, body, body_omitted] as the scripts reply them, or as the record holds them. */
export function parseResponse([status, headers, body, omitted]: unknown[], at: Corrupt): StoredResponse {
  if (!isHttpStatus(status)) throw at('status is not an HTTP status code');
  const pairs = headersOf(headers, at);
  if (omitted !== 0 && omitted !== 1) throw at('body_omitted is neither 0 nor 1');
  if (omitted === 0 && !Buffer.isBuffer(body)) throw at('body is missing');
  return {
    status,
    headers: pairs,
    // A copy: the reply buffer may be a view into a larger socket buffer.
    body: omitted === 1 ? null : new Uint8Array(body as Buffer),
    bodyOmitted: omitted === 1,
  };
}

// The headers last read, parsed, checked and frozen: the replays of a route carry the same ones,
// so their text is compared instead of parsed again (a JSON.parse costs more).
let lastHeaders: { readonly text: string; readonly pairs: StoredResponse['headers'] } = { text: '[]', pairs: Object.freeze([]) };

function headersOf(value: unknown, at: Corrupt): StoredResponse['headers'] {
  const json = text(value);
  if (json === lastHeaders.text) return lastHeaders.pairs;
  const pairs = parseJson(json, 'headers', at);
  const wrong = headersProblem(pairs);
  if (wrong !== undefined) throw at(wrong);
  const frozen = Object.freeze((pairs as Array<[string, string]>).map((pair) => Object.freeze(pair)));
  if (json !== undefined) lastHeaders = { text: json, pairs: frozen };
  return frozen;
}
