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
 * while `reap` can still find and delete it sooner, as it does in the SQL stores. A script's own
 * arguments start at ARGV[2].
 *
 * The scripts are written for the server's CPU, which every request of every process shares:
 * on the paths a request takes (claim of a new key, completion, replay) each `redis.call`, each
 * table built and each string formatted is a measurable part of the script's cost, so those
 * paths make the fewest calls that keep the decision atomic, and every number written is
 * formatted by `int` (an integer conversion: a Lua number handed to `redis.call` as it is goes
 * through the C library's floating-point printf: 81k → 77k instructions for a new key's claim).
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
local k = KEYS[1]
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
-- Epoch ms and durations are integers far below 2^53: exact as Lua numbers, exact through %d.
local function int(n) return string.format('%d', n) end
local function corrupt(why) return redis.error_reply('${CORRUPT_CODE} ' .. why) end
-- f is an HMGET of the record whose first fields are state, fingerprint, token, lease_until,
-- expires_at, attempt. Returns nil for a record (its three numbers converted in place), false
-- when there is no record, or the reason the hash cannot be a record (never guess at a payment's
-- state).
local function invalid(f)
  if not f[1] then
    if redis.call('EXISTS', k) == 1 then return 'the hash has no state field' end
    return false
  end
  if f[1] ~= 'in_flight' and f[1] ~= 'completed' then return 'unknown state "' .. f[1] .. '"' end
  if not f[2] or not f[3] then return 'fingerprint or token is missing' end
  f[4], f[5], f[6] = tonumber(f[4]), tonumber(f[5]), tonumber(f[6])
  if not f[4] or not f[5] or not f[6] then return 'lease_until, expires_at or attempt is missing or not a number' end
  return nil
end
-- Gone for every purpose once the window has passed and no live lease holds it.
local function expired(f, now)
  return f[5] <= now and (f[1] == 'completed' or f[4] <= now)
end
-- The TTL of a record that ends at \`ending\` (a time already past deletes it at once).
local function expire_after(ending) redis.call('PEXPIREAT', k, int(ending + ARGV[1])) end
-- Fenced operations act only for the current owner of an in-flight record: returns its fields,
-- false, or nil and the reason it is corrupt.
local function owned(token)
  local f = redis.call('HMGET', k, 'state', 'fingerprint', 'token', 'lease_until', 'expires_at', 'attempt')
  local err = invalid(f)
  if err then return nil, err end
  if err == nil and f[1] == 'in_flight' and f[3] == token then return f end
  return false
end
`;

function script(name: string, body: string): LuaScript {
  const source = `-- idemkit redis store: ${name}\n${PRELUDE}\n${body.trim()}\n`;
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * KEYS[1] record; ARGV[2..7] = fingerprint, new token, leaseMs, windowMs, scope, key.
 * Replies 0 for a new claim (the hot path: an integer, no table), or {'acquired', 1,
 * recovery_point, recovery_data} for a take-over | {'completed', status, headers, body,
 * body_omitted} | {'in_flight', retryAfterMs} | {'mismatch'}.
 * A replay, an in-flight answer and a mismatch write nothing.
 */
export const CLAIM = script(
  'claim',
  `
local now = now_ms()
-- EXISTS first: a new key, the common case, then needs no read of the hash.
if redis.call('EXISTS', k) == 1 then
  local f = redis.call('HMGET', k, 'state', 'fingerprint', 'token', 'lease_until', 'expires_at', 'attempt',
    'status', 'headers', 'body', 'body_omitted', 'recovery_point', 'recovery_data')
  local err = invalid(f)
  if err then return corrupt(err) end
  if not expired(f, now) then
    if f[2] ~= ARGV[2] then return {'mismatch'} end
    if f[1] == 'completed' then return {'completed', f[7], f[8], f[9], f[10]} end
    if f[4] > now then return {'in_flight', f[4] - now} end
    -- The same request, and its owner's lease ran out: take over. The window and the recovery
    -- point stay; the new token fences the earlier owner out.
    local lease_until = now + ARGV[4]
    redis.call('HSET', k, 'token', ARGV[3], 'lease_until', int(lease_until), 'attempt', int(f[6] + 1))
    expire_after(math.max(f[5], lease_until))
    return {'acquired', 1, f[11], f[12]}
  end
  -- Its window is over: a new request, with nothing of the old record kept.
  redis.call('DEL', k)
end
local lease_until, expires_at = now + ARGV[4], now + ARGV[5]
redis.call('HSET', k, 'state', 'in_flight', 'fingerprint', ARGV[2], 'token', ARGV[3], 'attempt', '1',
  'lease_until', int(lease_until), 'expires_at', int(expires_at), 'scope', ARGV[6], 'key', ARGV[7])
expire_after(math.max(expires_at, lease_until))
return 0
`,
);

/** KEYS[1]; ARGV[2..3] = token, leaseMs. Replies 1, or 0 when the token is not the current owner. */
export const RENEW = script(
  'renew',
  `
local f, err = owned(ARGV[2])
if err then return corrupt(err) end
if not f then return 0 end
local lease_until = now_ms() + ARGV[3]
redis.call('HSET', k, 'lease_until', int(lease_until))
-- Past its window an in-flight record lives on its lease alone: the TTL follows the lease.
expire_after(math.max(f[5], lease_until))
return 1
`,
);

/** KEYS[1]; ARGV[2..5] = token, point, has data '1'|'0', data JSON. Replies 1 or 0 (stale token). */
export const CHECKPOINT = script(
  'checkpoint',
  `
local f, err = owned(ARGV[2])
if err then return corrupt(err) end
if not f then return 0 end
if ARGV[4] == '1' then
  redis.call('HSET', k, 'recovery_point', ARGV[3], 'recovery_data', ARGV[5])
else
  redis.call('HSET', k, 'recovery_point', ARGV[3])
  redis.call('HDEL', k, 'recovery_data')
end
return 1
`,
);

/**
 * KEYS[1]; ARGV[2..6] = token, status, headers JSON, body_omitted '1'|'0', body (raw bytes,
 * absent when omitted). Replies 1, 0 (stale token), or 2 when this token's completion is already
 * stored: a retried completion whose first attempt landed but whose reply was lost. The whole
 * response is written at once or not at all.
 */
export const COMPLETE = script(
  'complete',
  `
local f = redis.call('HMGET', k, 'state', 'fingerprint', 'token', 'lease_until', 'expires_at', 'attempt')
local err = invalid(f)
if err then return corrupt(err) end
if err == false or f[3] ~= ARGV[2] then return 0 end
if f[1] == 'completed' then return 2 end
if ARGV[5] == '1' then
  redis.call('HSET', k, 'state', 'completed', 'status', ARGV[3], 'headers', ARGV[4], 'body_omitted', '1')
  redis.call('HDEL', k, 'body')
else
  redis.call('HSET', k, 'state', 'completed', 'status', ARGV[3], 'headers', ARGV[4], 'body_omitted', '0', 'body', ARGV[6])
end
-- Completed, the lease no longer matters: the record ends with its window. Its TTL already says
-- so unless a lease outlived the window (every TTL set so far was max(expires_at, lease) + grace).
if f[4] > f[5] then expire_after(f[5]) end
return 1
`,
);

/** KEYS[1]; ARGV[2] = token. Deletes an in-flight record of this owner. Replies 1 or 0 (stale token). */
export const RELEASE = script(
  'release',
  `
local f, err = owned(ARGV[2])
if err then return corrupt(err) end
if not f then return 0 end
redis.call('DEL', k)
return 1
`,
);

/**
 * KEYS[1]. Replies nil, or the record's state, fingerprint, lease_until, expires_at (integers),
 * recovery_point, recovery_data, status, headers, body, body_omitted. Writes nothing.
 */
export const READ = script(
  'read',
  `
local f = redis.call('HMGET', k, 'state', 'fingerprint', 'token', 'lease_until', 'expires_at', 'attempt',
  'recovery_point', 'recovery_data', 'status', 'headers', 'body', 'body_omitted')
local err = invalid(f)
if err then return corrupt(err) end
if err == false then return false end
return {f[1], f[2], f[4], f[5], f[7], f[8], f[9], f[10], f[11], f[12]}
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
if redis.call('TYPE', k).ok ~= 'hash' then return 0 end
local f = redis.call('HMGET', k, 'state', 'fingerprint', 'token', 'lease_until', 'expires_at', 'attempt')
if invalid(f) == nil and expired(f, now_ms()) then
  redis.call('DEL', k)
  return 1
end
return 0
`,
);
