/**
 * What the Worker's store and the Durable Object say to each other: one JSON request per operation
 * (`POST https://idemkit/<op>`), one JSON answer. JSON and not RPC, so that the object is a plain
 * class (RPC needs `cloudflare:workers`' `DurableObject` base, which Node cannot import) and the
 * store works with any stub that has `fetch`. Bodies travel as base64; recovery data as JSON.
 */
import type { IdempotencyRecord, StoredResponse } from '../../core/store.js';

export type Operation = 'claim' | 'renew' | 'checkpoint' | 'complete' | 'release' | 'get' | 'reap' | 'abandoned' | 'end-leases';

/** A stored response on the wire: the body in base64, `null` when omitted. */
export interface WireResponse {
  readonly status: number;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body: string | null;
  readonly bodyOmitted: boolean;
}

export type WireClaim =
  | { readonly kind: 'acquired'; readonly token: string; readonly takeover: boolean; readonly resumeFrom?: string; readonly recoveryData?: unknown }
  | { readonly kind: 'completed'; readonly response: WireResponse }
  | { readonly kind: 'in_flight'; readonly retryAfterMs: number; readonly renewedMsAgo: number }
  | { readonly kind: 'mismatch' };

export type WireRecord = Omit<IdempotencyRecord, 'response'> & { readonly response?: WireResponse | undefined };

/** A fenced write's answer: done, or the token is not the record's owner (`LeaseLostError`). */
export interface WireFenced {
  readonly ok: boolean;
}

// btoa and atob take Latin-1 strings; chunks keep String.fromCharCode's argument list short.
const CHUNK = 0x8000;

export function toBase64(bytes: Uint8Array): string {
  let text = '';
  for (let i = 0; i < bytes.length; i += CHUNK) text += String.fromCharCode(...bytes.subarray(i, i + CHUNK));
  return btoa(text);
}

export function fromBase64(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

export function toWireResponse(response: StoredResponse): WireResponse {
  return { status: response.status, headers: response.headers, body: response.body === null ? null : toBase64(response.body), bodyOmitted: response.bodyOmitted };
}

export function fromWireResponse(response: WireResponse): StoredResponse {
  return { status: response.status, headers: response.headers, body: response.body === null ? null : fromBase64(response.body), bodyOmitted: response.bodyOmitted };
}

/** A record as the store answers it: every field present, those JSON dropped (undefined) included. */
export function fromWireRecord(record: WireRecord): IdempotencyRecord {
  return {
    scope: record.scope,
    key: record.key,
    state: record.state,
    fingerprint: record.fingerprint,
    leaseUntil: record.leaseUntil,
    expiresAt: record.expiresAt,
    recoveryPoint: record.recoveryPoint,
    recoveryData: record.recoveryData,
    response: record.response === undefined ? undefined : fromWireResponse(record.response),
    createdAt: record.createdAt,
    updatedAt: record.updatedAt,
  };
}
