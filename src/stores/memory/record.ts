/**
 * One record of the memory store, packed small, and what the store counts for it (`maxBytes`).
 */
import { deserialize } from 'node:v8';
import type { IdempotencyRecord, StoredResponse } from '../../core/store.js';
import { plainRecord } from '../shared/record.js';
import { SLOT } from '../../core/slot-list.js';

/** What the memory store counts for each record besides its strings and response (object, map entry, fields). */
export const MEMORY_RECORD_OVERHEAD_BYTES = 256;
// Per header pair when headers are kept as a list: the pair's array and the list's slot.
const HEADER_PAIR_OVERHEAD_BYTES = 48;
// A response's fixed part (status, flags, the unpacked object once replayed).
const RESPONSE_OVERHEAD_BYTES = 64;

/**
 * One record, kept small: a completed response is packed into two strings (headers, body) and
 * unpacked on its first replay. Every object a record holds is copied by each young-generation
 * collection it survives, then marked by every full one; the unpacked form (response object,
 * header list, one array per header, a Buffer view) was ~10 objects. Measured on Express, new
 * keys: not keeping the response at all cut scavenge time per request from ~12.4 to 8.4–10.6 µs
 * (--trace-gc); packing it took the time added per request from 21.3 to 18.7 µs (A/B, same run).
 */
export class MemoryRecord {
  state: 'in_flight' | 'completed' = 'in_flight';
  attempt = 1;
  recoveryPoint: string | undefined = undefined;
  /** The checkpoint's data, serialized: a copy nobody else holds, and its size is known. */
  recoveryBytes: Buffer | undefined = undefined;
  /** What the store counts for this record (see `maxBytes`). */
  bytes = 0;
  status = 0;
  /** `name\nvalue\n…` (Node refuses CR and LF in header values), or undefined with `headerList`. */
  headerText: string | undefined = undefined;
  /** Headers that do not fit `headerText` (a newline, a character past U+00FF), as given. */
  headerList: ReadonlyArray<readonly [string, string]> | undefined = undefined;
  /** The body's bytes as a Latin-1 string (one byte per character); null when omitted. */
  bodyText: string | null = null;
  bodyOmitted = false;
  /** The unpacked response, once a replay asked for it. */
  unpacked: StoredResponse | undefined = undefined;
  /** Its place among the records in flight (`MemoryTable`), -1 once completed. */
  [SLOT] = -1;

  constructor(
    readonly scope: string,
    readonly key: string,
    public fingerprint: string,
    public token: string,
    public leaseUntil: number,
    public expiresAt: number,
    /** When this record was claimed; a take-over keeps it. */
    readonly createdAt: number,
    /** Its last change: claim, take-over, renewal, checkpoint, completion. */
    public updatedAt: number,
  ) {}

  complete(response: StoredResponse): void {
    this.state = 'completed';
    this.token = '';
    this.status = response.status;
    this.headerText = packHeaders(response.headers);
    // A copy either way: the caller's array and tuples are not ours to keep.
    this.headerList = this.headerText === undefined ? response.headers.map(([n, v]) => [n, v] as const) : undefined;
    const body = response.body;
    this.bodyText = body === null ? null : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('latin1');
    this.bodyOmitted = response.bodyOmitted;
  }

  get response(): StoredResponse | undefined {
    if (this.state !== 'completed') return undefined;
    if (this.unpacked === undefined) {
      this.unpacked = {
        status: this.status,
        headers: this.headerList ?? unpackHeaders(this.headerText!),
        body: this.bodyText === null ? null : Buffer.from(this.bodyText, 'latin1'),
        bodyOmitted: this.bodyOmitted,
      };
      // The unpacked form replaces the packed one: the body is held once, as `maxBytes` counts it.
      this.headerText = undefined;
      this.headerList = undefined;
      this.bodyText = null;
    }
    return this.unpacked;
  }

  get recoveryData(): unknown {
    return this.recoveryBytes === undefined ? undefined : deserialize(this.recoveryBytes);
  }
}

/** What the store counts for a record in flight (see `maxBytes`): overhead, strings, recovery point and data. */
export function inFlightBytes(r: MemoryRecord): number {
  const strings = r.scope.length + r.key.length + r.fingerprint.length + r.token.length + (r.recoveryPoint?.length ?? 0);
  return MEMORY_RECORD_OVERHEAD_BYTES + 2 * strings + (r.recoveryBytes?.byteLength ?? 0);
}

/**
 * What a response adds to its record. Headers are counted as the list a replay unpacks them into
 * (UTF-16 strings in small arrays), an upper bound on their packed text; the body by its bytes.
 */
export function responseBytes(response: StoredResponse): number {
  let n = RESPONSE_OVERHEAD_BYTES + (response.body?.byteLength ?? 0);
  for (const [name, value] of response.headers) n += 2 * (name.length + value.length) + HEADER_PAIR_OVERHEAD_BYTES;
  return n;
}

// Anything outside printable Latin-1 (and tab) is kept as a list instead.
const UNPACKABLE = /[^\t\x20-\x7e\x80-\xff]/;

function packHeaders(headers: StoredResponse['headers']): string | undefined {
  let text = '';
  for (const [name, value] of headers) {
    if (UNPACKABLE.test(name) || UNPACKABLE.test(value)) return undefined;
    text += text === '' ? `${name}\n${value}` : `\n${name}\n${value}`;
  }
  return text;
}

function unpackHeaders(text: string): Array<readonly [string, string]> {
  if (text === '') return [];
  const parts = text.split('\n');
  const headers: Array<readonly [string, string]> = [];
  for (let i = 0; i < parts.length; i += 2) headers.push([parts[i]!, parts[i + 1]!]);
  return headers;
}

/** The record as `get` answers it: without what the store keeps beside it. */
export const toRecord: (r: MemoryRecord) => IdempotencyRecord = plainRecord;
