// How the store commands and `idemkit ui` write what they show: a failure in one line, a time
// relative to now, and the stable JSON of a record, a listing and the counts (docs/cli.md), which
// the page serves as its API too.
import { isUtf8 } from 'node:buffer';
import { CorruptRecordError, IdemkitError, StoreSchemaMissingError, StoreUnavailableError } from '../core/errors.js';
import type { RecordDetails, RecordStats, RecordSummary } from '../core/store.js';
import { formatDuration } from '../check/flags.js';
import { Unreachable } from './open/driver.js';

/** How much of a body `inspect` shows: UTF-8 text up to this many bytes, binary as hex up to HEX_PREVIEW_BYTES. */
export const TEXT_PREVIEW_BYTES = 1024;
export const HEX_PREVIEW_BYTES = 32;

/** What a time a record does not know reads as: an earlier idemkit wrote no creation or update time. */
export const UNKNOWN_TIME = 'unknown (written by an earlier idemkit)';

/**
 * One line for any failure: never a stack trace. A missing table is worded by the command
 * (`schemaMissing`: the store commands say where they looked); `firstLine` cuts an idemkit
 * error's message at its first line too, as the page does.
 */
export function describeFailure(error: unknown, words: { schemaMissing(error: StoreSchemaMissingError): string; firstLine: boolean }): string {
  if (error instanceof Unreachable) return error.message;
  if (error instanceof StoreSchemaMissingError) return words.schemaMissing(error);
  if (error instanceof StoreUnavailableError || error instanceof CorruptRecordError) {
    const cause = (error as { cause?: unknown }).cause;
    const detail = cause instanceof Error && cause.message && !error.message.includes(cause.message) ? `: ${cause.message}` : '';
    return `${error.message}${detail}`.split('\n')[0]!;
  }
  if (error instanceof IdemkitError) return words.firstLine ? error.message.split('\n')[0]! : error.message;
  const message = error instanceof Error ? error.message || String((error as { code?: unknown }).code ?? error.name) : String(error);
  return `unexpected error: ${message.split('\n')[0]}`;
}

/** `at` from `now`'s side: "5s ago", or "in 5s" for a time still to come. */
export function ago(at: number, now: number): string {
  return at <= now ? `${formatDuration(now - at)} ago` : `in ${formatDuration(at - now)}`;
}

export const iso = (ms: number) => new Date(ms).toISOString();
/** A time a record may not have (written by an earlier idemkit): ISO, or null. */
const isoOrNull = (ms: number | null) => (ms === null ? null : iso(ms));

/** A body as `inspect` shows it: UTF-8 text cut at TEXT_PREVIEW_BYTES, anything else as hex. */
export function bodyPreview(body: Uint8Array): { bytes: number; encoding: 'utf8' | 'hex'; preview: string; truncated: boolean } {
  const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (isUtf8(bytes)) {
    let end = Math.min(bytes.length, TEXT_PREVIEW_BYTES);
    // Never cut a character in two: back up to the start of a UTF-8 sequence.
    while (end < bytes.length && end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
    return { bytes: bytes.length, encoding: 'utf8', preview: bytes.toString('utf8', 0, end), truncated: end < bytes.length };
  }
  const end = Math.min(bytes.length, HEX_PREVIEW_BYTES);
  return { bytes: bytes.length, encoding: 'hex', preview: bytes.toString('hex', 0, end), truncated: end < bytes.length };
}

/** The four times every record carries, in the order both JSON shapes list them. */
function times(r: { createdAt: number | null; updatedAt: number | null; leaseUntil: number; expiresAt: number }) {
  return { createdAt: isoOrNull(r.createdAt), updatedAt: isoOrNull(r.updatedAt), leaseUntil: iso(r.leaseUntil), expiresAt: iso(r.expiresAt) };
}

/** What names a record and says what it is, the first fields of both JSON shapes. */
function identity(r: Pick<RecordSummary, 'scope' | 'key' | 'state' | 'expired' | 'fingerprint'>) {
  return { scope: r.scope, key: r.key, state: r.state, expired: r.expired, fingerprint: r.fingerprint };
}

/** The stable JSON of `idemkit inspect --json` (docs/cli.md). */
export function inspectJson(r: RecordDetails) {
  const response = r.response;
  return {
    ...identity(r),
    tokenPrefix: r.tokenPrefix,
    attempt: r.attempt,
    ...times(r),
    now: iso(r.now),
    recoveryPoint: r.recoveryPoint ?? null,
    recoveryData: r.recoveryData ?? null,
    response: response
      ? {
          status: response.status,
          headers: response.headers.map(([name, value]) => [name, value]),
          bodyOmitted: response.bodyOmitted,
          body: response.body === null ? null : bodyPreview(response.body),
        }
      : null,
  };
}

/** One record of `idemkit list --json`. */
export function summaryJson(r: RecordSummary) {
  return {
    ...identity(r),
    attempt: r.attempt,
    ...times(r),
    recoveryPoint: r.recoveryPoint ?? null,
    status: r.status ?? null,
    bodyBytes: r.bodyBytes,
  };
}

/** The stable JSON of `idemkit stats --json`. */
export function statsJson(st: RecordStats) {
  return {
    now: iso(st.now),
    inFlight: st.inFlight,
    abandoned: st.abandoned,
    completed: st.completed,
    expired: st.expired,
    oldestInFlight: st.oldestInFlight && { scope: st.oldestInFlight.scope, key: st.oldestInFlight.key, leaseUntil: iso(st.oldestInFlight.leaseUntil) },
    bodyBytes: st.bodyBytes,
    storageBytes: st.storageBytes ?? null,
  };
}
