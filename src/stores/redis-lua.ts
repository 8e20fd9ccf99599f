/**
 * The Lua scripts of the Redis store. Each store operation is ONE script run (EVALSHA), so every
 * decision and its write happen atomically on the server, on the server's clock (`TIME`).
 *
 * A record is one hash. Its fields:
 *   scope, key            the idempotency (scope, key), for operators reading the hash
 *   fingerprint, state    'in_flight' | 'completed'
 *   token, attempt        the owner token (fencing) and how many claims it has had
 *   lease_until, expires_at   epoch ms on the Redis clock
 *   recovery_point, recovery_data   the last checkpoint (data is JSON; absent when none)
 *   status, headers, body, body_omitted   the stored response (headers JSON; body raw bytes)
 *
 * A record ends at `expires_at` once completed, and at max(expires_at, lease_until) while in
 * flight: from then on every script treats it as absent. Its key's TTL is that end plus a grace
 * (ARGV[1] of every script), so Redis deletes it by itself soon after, never under a live lease,
 * while `reap` can still find and delete it sooner, as it does in the SQL stores. The other
 * arguments of a script are A[1], A[2], … (ARGV without the grace).
 */
import { createHash } from 'node:crypto';

export interface LuaScript {
  readonly name: string;
  readonly source: string;
  /** SHA1 of the source: what EVALSHA names and what SCRIPT LOAD / EVAL cache. */
  readonly sha: string;
}

/** Errors a script raises on purpose start with this code, so the caller can tell them from failures. */
export const CORRUPT_CODE = 'IDEMKIT_CORRUPT';

const PRELUDE = `
local grace = tonumber(ARGV[1])
local A = {}
for i = 2, #ARGV do A[i - 1] = ARGV[i] end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Integers are written as plain digits: the default number-to-string conversion may use exponents.
local function int(n) return string.format('%.0f', n) end
-- The TTL of a record that ends at \`ending\` (a time already past deletes it at once).
local function expire_after(k, ending) redis.call('PEXPIREAT', k, int(ending + grace)) end
local function corrupt(why) return redis.error_reply('${CORRUPT_CODE} ' .. why) end
-- The fields every decision reads. Returns false when there is no record, or nil and a reason
-- when the hash cannot be a record (never guess at a payment's state).
local function load(k)
  local f = redis.call('HMGET', k, 'state', 'fingerprint', 'token', 'lease_until', 'expires_at', 'attempt')
  if not f[1] then
    if redis.call('EXISTS', k) == 1 then return nil, 'the hash has no state field' end
    return false
  end
  local r = { state = f[1], fingerprint = f[2], token = f[3],
              lease_until = tonumber(f[4]), expires_at = tonumber(f[5]), attempt = tonumber(f[6]) }
  if r.state ~= 'in_flight' and r.state ~= 'completed' then return nil, 'unknown state "' .. r.state .. '"' end
  if not r.fingerprint or not r.token then return nil, 'fingerprint or token is missing' end
  if not r.lease_until or not r.expires_at or not r.attempt then
    return nil, 'lease_until, expires_at or attempt is missing or not a number'
  end
  return r
end
-- Gone for every purpose once the window has passed and no live lease holds it.
local function expired(r, now)
  return r.expires_at <= now and (r.state == 'completed' or r.lease_until <= now)
end
-- Fenced operations act only for the current owner of an in-flight record.
local function owned(k, token)
  local r, err = load(k)
  if err then return nil, err end
  if r and r.state == 'in_flight' and r.token == token then return r end
  return false
end
`;

function script(name: string, body: string): LuaScript {
  const source = `-- idemkit redis store: ${name}\n${PRELUDE}\n${body.trim()}\n`;
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * KEYS[1] record; A = fingerprint, new token, leaseMs, windowMs, scope, key.
 * Replies {'acquired', takeover 0|1, recovery_point, recovery_data} | {'completed', status,
 * headers, body, body_omitted} | {'in_flight', retryAfterMs} | {'mismatch'}.
 * A replay, an in-flight answer and a mismatch write nothing.
 */
export const CLAIM = script(
  'claim',
  `
local k = KEYS[1]
local fp, token, lease_ms, window_ms = A[1], A[2], tonumber(A[3]), tonumber(A[4])
local now = now_ms()
local r, err = load(k)
if err then return corrupt(err) end
if r and not expired(r, now) then
  if r.fingerprint ~= fp then return {'mismatch'} end
  if r.state == 'completed' then
    return {'completed', unpack(redis.call('HMGET', k, 'status', 'headers', 'body', 'body_omitted'))}
  end
  if r.lease_until > now then return {'in_flight', r.lease_until - now} end
  -- The same request, and its owner's lease ran out: take over. The window and the recovery
  -- point stay; the new token fences the earlier owner out.
  local lease_until = now + lease_ms
  redis.call('HSET', k, 'token', token, 'lease_until', int(lease_until), 'attempt', int(r.attempt + 1))
  expire_after(k, math.max(r.expires_at, lease_until))
  local rp = redis.call('HMGET', k, 'recovery_point', 'recovery_data')
  return {'acquired', 1, rp[1], rp[2]}
end
-- Absent, or its window is over: a new request, with nothing of the old record kept.
if r then redis.call('DEL', k) end
local lease_until, expires_at = now + lease_ms, now + window_ms
redis.call('HSET', k, 'scope', A[5], 'key', A[6], 'fingerprint', fp, 'state', 'in_flight',
  'token', token, 'attempt', '1', 'lease_until', int(lease_until), 'expires_at', int(expires_at))
expire_after(k, math.max(expires_at, lease_until))
return {'acquired', 0}
`,
);

/** KEYS[1]; A = token, leaseMs. Replies 1, or 0 when the token is not the current owner. */
export const RENEW = script(
  'renew',
  `
local k = KEYS[1]
local r, err = owned(k, A[1])
if err then return corrupt(err) end
if not r then return 0 end
local lease_until = now_ms() + tonumber(A[2])
redis.call('HSET', k, 'lease_until', int(lease_until))
-- Past its window an in-flight record lives on its lease alone: the TTL follows the lease.
expire_after(k, math.max(r.expires_at, lease_until))
return 1
`,
);

/** KEYS[1]; A = token, point, has data '1'|'0', data JSON. Replies 1 or 0 (stale token). */
export const CHECKPOINT = script(
  'checkpoint',
  `
local k = KEYS[1]
local r, err = owned(k, A[1])
if err then return corrupt(err) end
if not r then return 0 end
if A[3] == '1' then
  redis.call('HSET', k, 'recovery_point', A[2], 'recovery_data', A[4])
else
  redis.call('HSET', k, 'recovery_point', A[2])
  redis.call('HDEL', k, 'recovery_data')
end
return 1
`,
);

/**
 * KEYS[1]; A = token, status, headers JSON, body_omitted '1'|'0', body (raw bytes, absent when
 * omitted). Replies 1, 0 (stale token), or 2 when this token's completion is already stored: a
 * retried completion whose first attempt landed but whose reply was lost. The whole response is
 * written at once or not at all.
 */
export const COMPLETE = script(
  'complete',
  `
local k = KEYS[1]
local r, err = load(k)
if err then return corrupt(err) end
if r and r.state == 'completed' and r.token == A[1] then return 2 end
if not r or r.state ~= 'in_flight' or r.token ~= A[1] then return 0 end
if A[4] == '1' then
  redis.call('HSET', k, 'state', 'completed', 'status', A[2], 'headers', A[3], 'body_omitted', '1')
  redis.call('HDEL', k, 'body')
else
  redis.call('HSET', k, 'state', 'completed', 'status', A[2], 'headers', A[3], 'body_omitted', '0', 'body', A[5])
end
-- Completed, the lease no longer matters: the record ends with its window.
expire_after(k, r.expires_at)
return 1
`,
);

/** KEYS[1]; A = token. Deletes an in-flight record of this owner. Replies 1 or 0 (stale token). */
export const RELEASE = script(
  'release',
  `
local k = KEYS[1]
local r, err = owned(k, A[1])
if err then return corrupt(err) end
if not r then return 0 end
redis.call('DEL', k)
return 1
`,
);

/** KEYS[1]. Replies nil, or the record's fields in `RECORD_FIELDS` order. Writes nothing. */
export const READ = script(
  'read',
  `
local k = KEYS[1]
local r, err = load(k)
if err then return corrupt(err) end
if not r then return false end
return redis.call('HMGET', k, 'state', 'fingerprint', 'lease_until', 'expires_at', 'recovery_point',
  'recovery_data', 'status', 'headers', 'body', 'body_omitted')
`,
);

/**
 * KEYS[1], a key found by SCAN. Deletes it when it is a record that has expired; replies 1 when
 * it did. Anything else under the prefix is left alone (a corrupt record is reported by the
 * operations that touch it, not destroyed by a sweep).
 */
export const REAP = script(
  'reap',
  `
local k = KEYS[1]
if redis.call('TYPE', k).ok ~= 'hash' then return 0 end
local r = load(k)
if r and expired(r, now_ms()) then
  redis.call('DEL', k)
  return 1
end
return 0
`,
);
