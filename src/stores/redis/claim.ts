/**
 * The Redis store's claim. A new key and a replay are one native `SET … NX GET`; every other
 * decision is the claim script, on the Redis clock.
 */
import { InvalidOptionError, StoreUnavailableError } from '../../core/errors.js';
import type { Claim, ClaimOptions, RecordRef } from '../../core/store.js';
import { newOwnerToken } from '../../core/token.js';
import { checkRecordRef } from '../../core/validate.js';
import type { RedisContext } from './context.js';
import { runScript } from './context.js';
import { CLAIM } from './lua.js';
import { decodeRecord, encodeFreshRecord } from './record.js';
import { WRONG_TYPE, corrupt, messageOf, parseJson, parseResponse, text } from './reply.js';

// How far inside its window a record returned by `SET … NX GET` must be, by this process's clock,
// for the client to answer from it (replay, mismatch) without asking the Redis clock. Closer to
// the end, a script decides. The window's end is on the Redis clock, or, for a record still in
// its fresh form, estimated on the clock of the process that created it. A clock that is off by
// more than this can only make a replay come slightly after the window: never a second execution,
// which only a script can grant.
const CLOCK_MARGIN_MS = 5_000;

export async function claim(c: RedisContext, ref: RecordRef, fingerprint: string, o: ClaimOptions): Promise<Claim> {
  // A lone surrogate has no UTF-8 form: the record's JSON would hold a scope Lua cannot read back.
  checkRecordRef(ref);
  const key = c.keyOf(ref);
  const token = newOwnerToken();
  const leaseMs = ms('leaseMs', o.leaseMs, 1);
  const windowMs = ms('windowMs', o.windowMs, 1);
  if (c.setNxGet) {
    const decided = await claimBySet(c, key, ref, fingerprint, token, o);
    if (decided !== undefined) return decided;
  }
  const reply = await runScript(c, CLAIM, key, ref, [fingerprint, token, leaseMs, windowMs, ref.scope, ref.key]);
  if (reply === 0) return { kind: 'acquired', token, takeover: false };
  const parts = Array.isArray(reply) ? reply : [];
  const at = (reason: string) => corrupt(key, ref, reason);
  switch (text(parts[0])) {
    case 'acquired': {
      const recoveryData = parts[3] == null ? undefined : parseJson(parts[3], 'recovery_data', at);
      return { kind: 'acquired', token, takeover: parts[1] === 1, resumeFrom: text(parts[2]), recoveryData };
    }
    case 'completed':
      return { kind: 'completed', response: parseResponse(parts.slice(1), at) };
    case 'in_flight':
      return { kind: 'in_flight', retryAfterMs: Math.max(1, Number(parts[1])), renewedMsAgo: parts[2] == null ? undefined : Number(parts[2]) };
    case 'mismatch':
      return { kind: 'mismatch' };
    default:
      throw new StoreUnavailableError(`redis store: unexpected claim reply for ${key}`);
  }
}

/**
 * The claim of a new key and a replay are one native command: `SET key <fresh record> NX PX
 * <ttl> GET` creates the record when the key is free (nil: acquired) and otherwise returns the
 * record unchanged. The client answers from it only where the Redis clock is not needed (a
 * completed or a differing record well inside its window); anything else (in flight, near or past
 * the window's end, a record it cannot decode) goes to the claim script, which decides on the
 * Redis clock. Undefined means: ask the script.
 */
async function claimBySet(c: RedisContext, key: string, ref: RecordRef, fingerprint: string, token: string, o: ClaimOptions): Promise<Claim | undefined> {
  const ttlMs = Math.max(o.leaseMs, o.windowMs) + c.grace;
  const fresh = encodeFreshRecord({
    fingerprint,
    token,
    leaseMs: o.leaseMs,
    windowMs: o.windowMs,
    scope: ref.scope,
    key: ref.key,
    ttlMs,
    now: Date.now(),
  });
  let reply: unknown;
  try {
    c.coalesce?.();
    reply = await c.client.send('set', key, [key, fresh, 'PX', ttlMs, 'NX', 'GET']);
  } catch (error) {
    const message = messageOf(error);
    if (message.startsWith('WRONGTYPE')) throw corrupt(key, ref, WRONG_TYPE);
    if (/syntax error/i.test(message)) {
      c.setNxGet = false; // the command did not run
      return undefined;
    }
    throw new StoreUnavailableError(`redis store: claim failed: ${message}`, { cause: error });
  }
  if (reply === null) return { kind: 'acquired', token, takeover: false };
  const record = Buffer.isBuffer(reply) ? decodeRecord(reply) : undefined;
  if (record === undefined || record.expiresAt - Date.now() <= CLOCK_MARGIN_MS) return undefined;
  if (record.fingerprint !== fingerprint) return { kind: 'mismatch' };
  // In flight: whether the lease is live, and how long ago the owner last wrote, are read on the
  // Redis clock, by the script.
  if (!record.completed) return undefined;
  const [status, headers, omitted, body] = record.response!;
  return { kind: 'completed', response: parseResponse([status, headers, body, omitted], (reason) => corrupt(key, ref, reason)) };
}

export function ms(name: string, value: number, min: 0 | 1): string {
  if (!Number.isSafeInteger(value) || value < min) throw new InvalidOptionError(name, `expected an integer >= ${min}, got ${String(value)}`);
  return String(value);
}
