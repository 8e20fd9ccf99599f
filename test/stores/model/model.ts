/**
 * The reference model of the store contract (src/core/store.ts): what every store must answer,
 * computed from a plain map of records and a virtual clock. The commands (commands.ts) run each
 * operation on the model and on a real store and compare.
 *
 * Time is virtual: `now` starts at 0 and moves only by jumps; the model decides on it. Every
 * duration is a whole number of the harness's unit, so a deadline is either on a jump's instant or
 * at least one unit away from it, never a hair away. Each deadline also keeps where it lies on the
 * store's own clock (`Deadline.lo`..`hi`): one instant where the harness sets that clock, the
 * readings before and after the call that set it (plus the duration) where the clock runs on its
 * own. The harness uses them to make a jump pass exactly the deadlines the model says it passes
 * (harness.ts), and the checks to bound the times the store reports.
 */
import type { RecordRef, StoredResponse } from '../../../src/core/store.js';

/** A deadline: virtual ms, and the bounds of the store-clock ms it was stored as. */
export interface Deadline {
  readonly v: number;
  lo: number;
  hi: number;
}

/** When an operation ran, on the store's clock: read just before the call and just after it returned. */
export interface CallTime {
  readonly before: number;
  readonly after: number;
}

const deadline = (v: number, ms: number, at: CallTime): Deadline => ({ v, lo: at.before + ms, hi: at.after + ms });

/**
 * When a write happened, on the store's clock: the bounds of the call that made it (one instant
 * on a set clock). Not a deadline: no decision reads it, and a jump does not move it (the
 * PostgreSQL harness moves the stored deadlines, not the stored times).
 */
export interface Stamp {
  readonly lo: number;
  readonly hi: number;
}

const stamp = (at: CallTime): Stamp => ({ lo: at.before, hi: at.after });

export interface ModelRecord {
  readonly ref: RecordRef;
  fingerprint: string;
  state: 'in_flight' | 'completed';
  /** The current owner's token; '' once completed (no token is current any more). */
  token: string;
  /** Claims of the record in its window: 1, plus one per take-over (what `admin.inspect` shows). */
  attempt: number;
  lease: Deadline;
  expires: Deadline;
  recoveryPoint: string | undefined;
  recoveryData: unknown;
  /** As the store must keep it: the body dropped and marked omitted past `maxResponseBytes`. */
  response: StoredResponse | undefined;
  /** `createdAt`: the claim that made the record; a take-over keeps it. */
  created: Stamp;
  /** `updatedAt`: the last claim, renewal, checkpoint or completion (`touch`); reads leave it. */
  updated: Stamp;
}

/** A token handed out by a claim, kept by the one it was given to, whether or not it is still current. */
export interface HeldToken {
  readonly ref: number;
  readonly token: string;
}

export type ExpectedClaim =
  | { readonly kind: 'acquired'; readonly takeover: boolean; readonly resumeFrom: string | undefined; readonly recoveryData: unknown }
  | { readonly kind: 'completed'; readonly response: StoredResponse }
  | { readonly kind: 'in_flight'; readonly retryAfterMs: number }
  | { readonly kind: 'mismatch' };

const text = (s: string) => new TextEncoder().encode(s);

/**
 * The refs every run draws from: few, so that claims collide. The same key in several scopes
 * (and in the empty scope), keys that differ only by case or a trailing space (MySQL's PAD SPACE
 * collations would join those), the longest key (255 characters), quotes and backslashes (what an
 * sf-string key may carry), and non-ASCII scopes and keys (the contract suite's emoji cases).
 * Keys hold no control character (parseIdempotencyKey refuses them, and stores take keys already
 * validated); the last ref's scope holds NUL, which a scope hook may return: every store keeps it
 * but PostgreSQL, which refuses it (InvalidRecordRefError, test/stores/postgres.test.ts) and so
 * runs without that ref.
 */
export const REFS: readonly RecordRef[] = [
  { scope: '', key: 'k' },
  { scope: 'tenant-a', key: 'k' },
  { scope: 'tenant-a', key: 'K' },
  { scope: 'tenant-a', key: 'k ' },
  { scope: 'tenant-\u{1F600}', key: 'k' },
  { scope: 'tenant-\u{1F601}', key: 'k' },
  { scope: "o'brien \"q\" \\", key: "\"quoted\" 'single' back\\slash" },
  { scope: 'tenant-a', key: `${'long-key-'.repeat(28)}\\"'` }, // 255 characters
  { scope: 'tenant-ü', key: 'ключ-\u{1F680}-ü' },
  { scope: 'tenant\u0000a', key: 'k' },
];

export const FINGERPRINTS = ['fp-1', 'fp-2'] as const;

/**
 * Response bodies: `over-limit` is one byte past the store's `maxResponseBytes` (the store must
 * omit it), `view` a window into a larger buffer (a store must honour byteOffset), `omitted` one
 * the caller already left out (null).
 */
export type BodyKind = 'empty' | 'json' | 'every-byte' | 'not-utf8' | 'at-limit' | 'over-limit' | 'view' | 'omitted';
export const BODY_KINDS: readonly BodyKind[] = ['empty', 'json', 'every-byte', 'not-utf8', 'at-limit', 'over-limit', 'view', 'omitted'];

export function body(kind: BodyKind, maxResponseBytes: number): Uint8Array | null {
  switch (kind) {
    case 'omitted':
      return null;
    case 'view':
      return Uint8Array.from({ length: 64 }, (_, i) => 0x41 + (i % 26)).subarray(7, 7 + Math.min(20, maxResponseBytes));
    case 'empty':
      return new Uint8Array(0);
    case 'json':
      return text('{"id":"ch_1","note":"ü\u{1F600}"}');
    case 'every-byte':
      return Uint8Array.from({ length: Math.min(256, maxResponseBytes) }, (_, i) => i);
    case 'not-utf8':
      // A lone continuation byte, an overlong NUL, a truncated sequence, a surrogate's encoding.
      return Uint8Array.from([0x80, 0xc0, 0x80, 0xe2, 0x82, 0xed, 0xa0, 0x80, 0xff, 0xfe, 0x00]);
    case 'at-limit':
      return Uint8Array.from({ length: maxResponseBytes }, (_, i) => (i * 7) % 256);
    case 'over-limit':
      return Uint8Array.from({ length: maxResponseBytes + 1 }, (_, i) => (i * 13) % 256);
  }
}

export const HEADER_SETS: ReadonlyArray<ReadonlyArray<readonly [string, string]>> = [
  [],
  [['content-type', 'application/json']],
  // Latin-1 text in values (obs-text, 0x80–0xFF): the widest a response can carry, since Node's
  // writeHead and WHATWG Headers refuse anything above U+00FF, and the stores' decoders report a
  // stored value HTTP forbids as a corrupt record (src/stores/shared/stored-response.ts).
  [
    ['x-latin', 'café\tbar'],
    ['x-obs-text', '\u00a0ÿ ½ é\u0080'],
  ],
  [
    ['etag', '"v1"'],
    ['link', '<a>; rel=next'],
    ['link', '<b>; rel=prev'],
  ],
];

export const STATUSES = [200, 201, 204, 409, 500] as const;

/** Recovery points, including the empty one (which is not "no point"). */
export const POINTS = ['charged', 'step-2', 'шаг-\u{1F600}', '', 'quote\'"\\'] as const;
/**
 * Checkpoint data: JSON values (the SQL stores keep JSON text), or none; falsy ones (which a
 * store must not mistake for "none"), NUL inside a string (PostgreSQL's jsonb would refuse it),
 * and a lone surrogate (JSON.stringify escapes it; a UTF-8 round trip would not keep it).
 */
export const DATA: readonly unknown[] = [
  undefined,
  { chargeId: 'ch_1' },
  'text',
  [1, 'two', null, { three: 3 }],
  { nested: { s: 'ü\u{1F600}', n: -1.5, big: Number.MAX_SAFE_INTEGER } },
  null,
  false,
  0,
  '',
  {},
  [],
  { nul: 'a\u0000b' },
  { lone: 'x\uD800y' },
];

export class StoreModel {
  /** Virtual ms since the run began. */
  now = 0;
  jumps = 0;
  readonly records = new Map<number, ModelRecord>();
  readonly tokens: HeldToken[] = [];

  constructor(readonly maxResponseBytes: number) {}

  private live(i: number): ModelRecord | undefined {
    const r = this.records.get(i);
    return r && !this.expired(r) ? r : undefined;
  }

  /** Past its window, and no live lease holds it: claims treat it as absent, `reap` may delete it. */
  expired(r: ModelRecord): boolean {
    return r.expires.v <= this.now && (r.state === 'completed' || r.lease.v <= this.now);
  }

  /** What a claim must answer; `acquire` then records the token the store handed out. */
  claim(i: number, fingerprint: string): ExpectedClaim {
    const r = this.live(i);
    if (r === undefined) return { kind: 'acquired', takeover: false, resumeFrom: undefined, recoveryData: undefined };
    if (r.fingerprint !== fingerprint) return { kind: 'mismatch' };
    if (r.state === 'completed') return { kind: 'completed', response: r.response! };
    if (r.lease.v > this.now) return { kind: 'in_flight', retryAfterMs: r.lease.v - this.now };
    return { kind: 'acquired', takeover: true, resumeFrom: r.recoveryPoint, recoveryData: r.recoveryData };
  }

  acquire(i: number, fingerprint: string, token: string, leaseMs: number, windowMs: number, at: CallTime): void {
    const r = this.live(i);
    this.tokens.push({ ref: i, token });
    if (r !== undefined) {
      // A take-over: the window and the recovery point stay.
      r.token = token;
      r.attempt++;
      r.lease = deadline(this.now + leaseMs, leaseMs, at);
      r.updated = stamp(at);
      return;
    }
    this.records.set(i, {
      ref: REFS[i]!,
      fingerprint,
      state: 'in_flight',
      token,
      attempt: 1,
      lease: deadline(this.now + leaseMs, leaseMs, at),
      expires: deadline(this.now + windowMs, windowMs, at),
      recoveryPoint: undefined,
      recoveryData: undefined,
      response: undefined,
      created: stamp(at),
      updated: stamp(at),
    });
  }

  /** The record `token` may act on: in flight, and `token` is its current owner's (expired or not). */
  owned(i: number, token: string): ModelRecord | undefined {
    const r = this.records.get(i);
    return r && r.state === 'in_flight' && r.token === token ? r : undefined;
  }

  renew(i: number, token: string, leaseMs: number, at: CallTime): boolean {
    const r = this.owned(i, token);
    if (r) {
      r.lease = deadline(this.now + leaseMs, leaseMs, at);
      r.updated = stamp(at);
    }
    return r !== undefined;
  }

  /**
   * A checkpoint or completion the store took, in the call `at` (they are decided before the call,
   * their time known only after it): the record's last change.
   */
  touch(i: number, at: CallTime): void {
    const r = this.records.get(i);
    if (r) r.updated = stamp(at);
  }

  checkpoint(i: number, token: string, point: string, data: unknown): boolean {
    const r = this.owned(i, token);
    if (r) {
      r.recoveryPoint = point;
      r.recoveryData = data;
    }
    return r !== undefined;
  }

  complete(i: number, token: string, response: StoredResponse): boolean {
    const r = this.owned(i, token);
    if (r) {
      r.state = 'completed';
      r.token = '';
      r.response =
        response.body !== null && response.body.byteLength > this.maxResponseBytes
          ? { status: response.status, headers: response.headers, body: null, bodyOmitted: true }
          : response;
    }
    return r !== undefined;
  }

  release(i: number, token: string): boolean {
    const r = this.owned(i, token);
    if (r) this.records.delete(i);
    return r !== undefined;
  }

  /** In flight, lease over, window open: what `listAbandoned` lists. */
  abandoned(): ModelRecord[] {
    return [...this.records.values()].filter((r) => r.state === 'in_flight' && r.lease.v <= this.now && r.expires.v > this.now);
  }

  /** Every deadline a record holds. */
  deadlines(): Deadline[] {
    return [...this.records.values()].flatMap((r) => [r.lease, r.expires]);
  }

  /** The refs `reap` may delete now. */
  reapable(): number[] {
    return [...this.records.entries()].filter(([, r]) => this.expired(r)).map(([i]) => i);
  }
}
