/**
 * The Redis store's record, as the client writes and reads it (the format is described in
 * redis-lua.ts): the fresh record of a new key, the response a completion appends, and the record
 * that `SET … NX GET` returns. The MessagePack here is the small part Redis' `cmsgpack` produces
 * and reads: arrays, strings, binaries, integers, floats, booleans and nil.
 */
import { HEAD_BYTES, RECORD_FORMAT } from './redis-lua.js';

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
  const head =
    `${RECORD_FORMAT}I${f.token}${pad(f.leaseMs, DIGITS)}${pad(f.windowMs, DIGITS)}${pad(f.ttlMs, DIGITS)}` +
    `${pad(1, 10)}${pad(f.now, DIGITS)}`;
  if (head.length !== HEAD_BYTES) throw new RangeError('redis store: a record head needs a 32-character token and durations under 10^16 ms');
  return `${head}${JSON.stringify([f.fingerprint, f.scope, f.key, false, false])}\n`;
}

/** The response a completion appends: [status, headers JSON, body_omitted, body | false]. */
export function encodeResponse(status: number, headersJson: string, body: Uint8Array | null): Buffer {
  const headers = Buffer.byteLength(headersJson);
  const size = 1 + 9 + strHeaderSize(headers) + headers + 1 + (body === null ? 1 : 5 + body.byteLength);
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  out[at++] = 0x94; // an array of 4
  out[at++] = 0xcb;
  at = out.writeDoubleBE(status, at);
  at = writeStr(out, at, headersJson, headers);
  out[at++] = body === null ? 1 : 0;
  if (body === null) out[at++] = 0xc2;
  else {
    out[at++] = 0xdb; // str 32, binary-safe (Redis' cmsgpack reads no bin types)
    at = out.writeUInt32BE(body.byteLength, at);
    out.set(body, at);
  }
  return out;
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
    const rest: unknown = JSON.parse(value.toString('utf8', HEAD_BYTES, newline));
    if (!Array.isArray(rest) || typeof rest[0] !== 'string') return undefined;
    let response: unknown[] | undefined;
    if (completed) {
      const parts = new Reader(value, newline + 1).read();
      if (!Array.isArray(parts)) return undefined;
      // Headers as text, the body as bytes (a view into the reply: the caller copies it).
      response = parts.map((v, i) => (v instanceof Span ? (i === 3 ? v.bytes(value) : v.text(value)) : v));
    }
    return { completed, fingerprint: rest[0], leaseUntil, expiresAt, response };
  } catch {
    return undefined;
  }
}

/** The zero-padded decimal in value[from, to), or -1; read byte by byte (a replay reads four). */
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

function strHeaderSize(length: number): number {
  return length < 32 ? 1 : length < 0x100 ? 2 : length < 0x10000 ? 3 : 5;
}

/** Writes the MessagePack str of `s` (`n` UTF-8 bytes) at `at`; returns the offset after it. */
function writeStr(out: Buffer, at: number, s: string, n: number): number {
  if (n < 32) out[at++] = 0xa0 | n;
  else if (n < 0x100) {
    out[at++] = 0xd9;
    out[at++] = n;
  } else if (n < 0x10000) {
    out[at++] = 0xda;
    at = out.writeUInt16BE(n, at);
  } else {
    out[at++] = 0xdb;
    at = out.writeUInt32BE(n, at);
  }
  return at + out.write(s, at, 'utf8');
}

/** Where a string or binary lies in the input: decoded only if asked for, without a Buffer view per field. */
class Span {
  constructor(
    readonly start: number,
    readonly end: number,
  ) {}

  text(buf: Buffer): string {
    return buf.toString('utf8', this.start, this.end);
  }

  bytes(buf: Buffer): Buffer {
    return buf.subarray(this.start, this.end);
  }
}

type Value = Span | number | boolean | null | Value[];

/** Reads one MessagePack value at a time from `buf`, starting at `at`. */
class Reader {
  constructor(
    private readonly buf: Buffer,
    private at: number,
  ) {}

  read(): Value {
    const type = this.byte();
    if (type < 0x80) return type;
    if (type >= 0xe0) return type - 0x100;
    if ((type & 0xf0) === 0x90) return this.array(type & 0x0f);
    if ((type & 0xe0) === 0xa0) return this.span(type & 0x1f);
    switch (type) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
      case 0xd9:
        return this.span(this.uint(1));
      case 0xc5:
      case 0xda:
        return this.span(this.uint(2));
      case 0xc6:
      case 0xdb:
        return this.span(this.uint(4));
      case 0xca:
        return this.buf.readFloatBE(this.advance(4));
      case 0xcb:
        return this.buf.readDoubleBE(this.advance(8));
      case 0xcc:
        return this.uint(1);
      case 0xcd:
        return this.uint(2);
      case 0xce:
        return this.uint(4);
      case 0xcf:
        return Number(this.buf.readBigUInt64BE(this.advance(8)));
      case 0xd0:
        return this.buf.readInt8(this.advance(1));
      case 0xd1:
        return this.buf.readInt16BE(this.advance(2));
      case 0xd2:
        return this.buf.readInt32BE(this.advance(4));
      case 0xd3:
        return Number(this.buf.readBigInt64BE(this.advance(8)));
      case 0xdc:
        return this.array(this.uint(2));
      case 0xdd:
        return this.array(this.uint(4));
      default:
        throw new RangeError(`MessagePack type 0x${type.toString(16)} is not part of a record`);
    }
  }

  private array(n: number): Value[] {
    const items: Value[] = [];
    for (let i = 0; i < n; i++) items.push(this.read());
    return items;
  }

  private byte(): number {
    return this.buf[this.advance(1)]!;
  }

  private uint(size: 1 | 2 | 4): number {
    return this.buf.readUIntBE(this.advance(size), size);
  }

  private span(n: number): Span {
    return new Span(this.advance(n), this.at);
  }

  /** Moves past `n` bytes and returns where they start; throws when the input ends first. */
  private advance(n: number): number {
    const start = this.at;
    if (start + n > this.buf.length) throw new RangeError('truncated');
    this.at = start + n;
    return start;
  }
}
