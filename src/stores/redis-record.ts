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
 * The client does not know the Redis clock, so lease and window go in as durations, with the TTL;
 * the scripts turn them into times when they first read it.
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
}): Buffer {
  const head =
    `${RECORD_FORMAT}I${f.token}${pad(f.leaseMs, DIGITS)}${pad(f.windowMs, DIGITS)}${pad(f.ttlMs, DIGITS)}` +
    `${pad(1, 10)}${pad(f.now, DIGITS)}`;
  if (head.length !== HEAD_BYTES) throw new RangeError('redis store: an owner token has 32 characters');
  const strings = [f.fingerprint, f.scope, f.key].map((s) => Buffer.from(s, 'utf8'));
  let size = HEAD_BYTES + 1 + 2; // the head, the array header, two `false`s
  for (const s of strings) size += strHeaderSize(s.length) + s.length;
  const out = Buffer.allocUnsafe(size);
  let at = out.write(head, 0, 'latin1');
  out[at++] = 0x95; // an array of 5
  for (const s of strings) at = writeStr(out, at, s);
  out[at++] = 0xc2;
  out[at++] = 0xc2;
  return out;
}

/** The response a completion appends: [status, headers JSON, body_omitted, body | false]. */
export function encodeResponse(status: number, headersJson: string, body: Uint8Array | null): Buffer {
  const headers = Buffer.from(headersJson, 'utf8');
  const size = 1 + 9 + strHeaderSize(headers.length) + headers.length + 1 + (body === null ? 1 : 5 + body.byteLength);
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  out[at++] = 0x94; // an array of 4
  at = writeNumber(out, at, status);
  at = writeStr(out, at, headers);
  out[at++] = body === null ? 1 : 0;
  if (body === null) out[at++] = 0xc2;
  else {
    out[at++] = 0xdb; // str 32, binary-safe (Redis' cmsgpack reads no bin types)
    out.writeUInt32BE(body.byteLength, at);
    at += 4;
    out.set(body, at);
    at += body.byteLength;
  }
  return out.subarray(0, at);
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
  if (leaseUntil === undefined || expiresAt === undefined || freshTtl === undefined || createdAt === undefined) return undefined;
  if (freshTtl > 0) {
    leaseUntil += createdAt;
    expiresAt += createdAt;
  }
  try {
    const reader = new Reader(value, HEAD_BYTES);
    const rest = reader.read();
    if (!Array.isArray(rest) || !Buffer.isBuffer(rest[0])) return undefined;
    const response = completed ? reader.read() : undefined;
    if (completed && !Array.isArray(response)) return undefined;
    return {
      completed,
      fingerprint: rest[0].toString('utf8'),
      leaseUntil,
      expiresAt,
      response: response as unknown[] | undefined,
    };
  } catch {
    return undefined;
  }
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, '0');
}

/** The zero-padded decimal in value[from, to), or undefined; read byte by byte (a replay reads four). */
function digits(value: Buffer, from: number, to: number): number | undefined {
  let n = 0;
  for (let i = from; i < to; i++) {
    const d = value[i]! - 0x30;
    if (d < 0 || d > 9) return undefined;
    n = n * 10 + d;
  }
  return n;
}

function strHeaderSize(length: number): number {
  return length < 32 ? 1 : length < 0x100 ? 2 : length < 0x10000 ? 3 : 5;
}

function writeStr(out: Buffer, at: number, s: Buffer): number {
  const n = s.length;
  if (n < 32) out[at++] = 0xa0 | n;
  else if (n < 0x100) {
    out[at++] = 0xd9;
    out[at++] = n;
  } else if (n < 0x10000) {
    out[at++] = 0xda;
    out.writeUInt16BE(n, at);
    at += 2;
  } else {
    out[at++] = 0xdb;
    out.writeUInt32BE(n, at);
    at += 4;
  }
  return at + s.copy(out, at);
}

function writeNumber(out: Buffer, at: number, n: number): number {
  out[at++] = 0xcb;
  out.writeDoubleBE(n, at);
  return at + 8;
}

type Value = Buffer | number | boolean | null | Value[];

/** Reads one MessagePack value; strings and binaries stay bytes (views into the input). */
class Reader {
  constructor(
    private readonly buf: Buffer,
    private at: number,
  ) {}

  read(): Value {
    const b = this.buf;
    const type = b[this.at++]!;
    if (type === undefined) throw new RangeError('truncated');
    if (type < 0x80) return type;
    if (type >= 0xe0) return type - 0x100;
    if ((type & 0xf0) === 0x90) return this.array(type & 0x0f);
    if ((type & 0xe0) === 0xa0) return this.bytes(type & 0x1f);
    switch (type) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
      case 0xd9:
        return this.bytes(this.uint(1));
      case 0xc5:
      case 0xda:
        return this.bytes(this.uint(2));
      case 0xc6:
      case 0xdb:
        return this.bytes(this.uint(4));
      case 0xca:
        return this.take(4).readFloatBE(0);
      case 0xcb:
        return this.take(8).readDoubleBE(0);
      case 0xcc:
        return this.uint(1);
      case 0xcd:
        return this.uint(2);
      case 0xce:
        return this.uint(4);
      case 0xcf:
        return Number(this.take(8).readBigUInt64BE(0));
      case 0xd0:
        return this.take(1).readInt8(0);
      case 0xd1:
        return this.take(2).readInt16BE(0);
      case 0xd2:
        return this.take(4).readInt32BE(0);
      case 0xd3:
        return Number(this.take(8).readBigInt64BE(0));
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

  private uint(size: 1 | 2 | 4): number {
    return this.take(size).readUIntBE(0, size);
  }

  private bytes(n: number): Buffer {
    return this.take(n);
  }

  private take(n: number): Buffer {
    if (this.at + n > this.buf.length) throw new RangeError('truncated');
    const view = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return view;
  }
}
