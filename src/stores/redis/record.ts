/**
 * The Redis store's record, as the client writes and reads it (the format is described in
 * lua.ts): the fresh record of a new key, the response a completion appends, and the record
 * that `SET … NX GET` returns.
 */
import { isUtf8 } from 'node:buffer';
import { jsonString } from './json-text.js';
import { HEAD_BYTES, RECORD_FORMAT } from './lua.js';

/**
 * A record as `SET … NX GET` returned it. Its times are on the Redis clock, or, for a fresh
 * record, estimates on the clock of the client that created it: good enough to choose between
 * answering from the record and asking a script, never to grant an execution.
 */
export interface RedisRecord {
  readonly completed: boolean;
  readonly fingerprint: string;
  readonly leaseUntil: number;
  readonly expiresAt: number;
  /** [status, headers JSON, body_omitted, body] of a completed record. */
  readonly response: readonly unknown[] | undefined;
}

const DIGITS = 16;
const FORMAT_BYTE = RECORD_FORMAT.charCodeAt(0);

/**
 * A fresh in-flight record: the value `SET key <this> NX PX <ttl> GET` creates for a new key.
 * The client does not know the Redis clock, so lease and window go in as durations, with the TTL
 * (a script derives the times from the key's remaining TTL) and this process's clock (for clients).
 * It is text (the head, then JSON and a newline), so ioredis sends it as a plain string argument:
 * one Buffer argument makes it encode the whole command through Buffer.concat.
 */
export function encodeFreshRecord(f: {
  fingerprint: string;
  token: string;
  leaseMs: number;
  windowMs: number;
  scope: string;
  key: string;
  ttlMs: number;
  now: number;
}): string {
  const head = `${RECORD_FORMAT}I${f.token}${durations(f.leaseMs, f.windowMs, f.ttlMs)}${pad(f.now, DIGITS)}`;
  if (head.length !== HEAD_BYTES) throw new RangeError('redis store: a record head needs a 32-character token and durations under 10^16 ms');
  return `${head}[${jsonString(f.fingerprint)},${jsonString(f.scope)},${jsonString(f.key)},false,false]\n`;
}

// Lease, window and TTL (then the attempt, 1) as a fresh record's head writes them: the same for
// every request of a route, so the last ones are kept.
let lastDurations = { leaseMs: -1, windowMs: -1, ttlMs: -1, text: '' };

function durations(leaseMs: number, windowMs: number, ttlMs: number): string {
  const last = lastDurations;
  if (last.leaseMs === leaseMs && last.windowMs === windowMs && last.ttlMs === ttlMs) return last.text;
  const text = `${pad(leaseMs, DIGITS)}${pad(windowMs, DIGITS)}${pad(ttlMs, DIGITS)}${pad(1, 10)}`;
  lastDurations = { leaseMs, windowMs, ttlMs, text };
  return text;
}

/**
 * The response a completion appends: status (3 digits), body_omitted ('0' or '1'), the headers'
 * length in UTF-8 bytes (10 digits), the headers JSON, then the body's bytes. A string when the
 * body is UTF-8 (JSON and text answers are), so ioredis sends the completion as plain string
 * arguments: one Buffer argument makes it build the whole command through Buffer.concat, ~2 µs
 * more per completion. Other bodies go as a Buffer, byte for byte.
 */
export function encodeResponse(status: number, headersJson: string, body: Uint8Array | null): string | Buffer {
  if (!Number.isInteger(status) || status < 100 || status > 999) throw new RangeError(`redis store: ${status} is not an HTTP status code`);
  const head = `${status}${body === null ? 1 : 0}${pad(Buffer.byteLength(headersJson), 10)}${headersJson}`;
  if (body === null || body.byteLength === 0) return head;
  const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  // Valid UTF-8 decodes and encodes back to the very same bytes.
  return isUtf8(bytes) ? head + bytes.toString('utf8') : Buffer.concat([Buffer.from(head), bytes]);
}

/** The record in `value`, or undefined when it is not one this client can read (a script then decides). */
export function decodeRecord(value: Buffer): RedisRecord | undefined {
  if (value.length < HEAD_BYTES || value[0] !== FORMAT_BYTE) return undefined;
  const completed = value[1] === 0x43; // 'C'
  if (!completed && value[1] !== 0x49) return undefined; // 'I'
  let leaseUntil = digits(value, 34, 50);
  let expiresAt = digits(value, 50, 66);
  const freshTtl = digits(value, 66, 82);
  const createdAt = digits(value, 92, 108);
  if (leaseUntil < 0 || expiresAt < 0 || freshTtl < 0 || createdAt < 0) return undefined;
  if (freshTtl > 0) {
    leaseUntil += createdAt;
    expiresAt += createdAt;
  }
  try {
    const newline = value.indexOf(0x0a, HEAD_BYTES);
    if (newline < 0) return undefined;
    const fingerprint = leadingString(value, HEAD_BYTES, newline);
    if (fingerprint === undefined) return undefined;
    let response: unknown[] | undefined;
    if (completed) {
      const at = newline + 1;
      if (value.length < at + 14) return undefined;
      const status = digits(value, at, at + 3);
      const omitted = value[at + 3]! - 0x30;
      const length = digits(value, at + 4, at + 14);
      const bodyAt = at + 14 + length;
      if (status < 0 || (omitted !== 0 && omitted !== 1) || length < 0 || bodyAt > value.length) return undefined;
      // Headers as text, the body as bytes (a view into the reply: the caller copies it).
      response = [status, value.toString('utf8', at + 14, bodyAt), omitted, omitted === 1 ? false : value.subarray(bodyAt)];
    }
    return { completed, fingerprint, leaseUntil, expiresAt, response };
  } catch {
    return undefined;
  }
}

/**
 * The first item of the JSON array in value[from, to), a string (the record's fingerprint), or
 * undefined. Read in place when it holds no escape (as every fingerprint idemkit makes), else by
 * JSON.parse of the whole array: a replay then parses no JSON for it.
 */
function leadingString(value: Buffer, from: number, to: number): string | undefined {
  if (value[from] === 0x5b && value[from + 1] === 0x22) {
    for (let i = from + 2; i < to; i++) {
      const byte = value[i]!;
      if (byte === 0x22) return value[i + 1] === 0x2c ? value.toString('utf8', from + 2, i) : undefined;
      if (byte === 0x5c || byte < 0x20) break; // an escape, or a control character (no JSON): left to JSON.parse
    }
  }
  const rest: unknown = JSON.parse(value.toString('utf8', from, to));
  return Array.isArray(rest) && typeof rest[0] === 'string' ? rest[0] : undefined;
}

/** The zero-padded decimal in value[from, to), or -1; read byte by byte (a replay reads six). */
function digits(value: Buffer, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i++) {
    const d = value[i]! - 0x30;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, '0');
}
