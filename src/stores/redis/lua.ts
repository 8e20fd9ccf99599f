/**
 * The Lua scripts of the Redis store, and the record format they share with record.ts.
 *
 * A record is one string: a fixed-width ASCII head, then JSON (Redis' Lua has `cjson`, in C) and
 * the response:
 *   head (108 bytes): format '3' | state 'I' (in flight) or 'C' (completed) | owner token (32) |
 *     lease_until (16 digits) | expires_at (16) | fresh TTL (16; 0 once absolute) | attempt (10) |
 *     client clock at creation (16; 0 once absolute)
 *   then the JSON array [fingerprint, scope, key, recovery_point, recovery_data] (false when
 *   absent), to which a script that writes the record adds the times "<created_at><updated_at>"
 *   (one string of 16 + 16 digits, epoch ms on the Redis clock, 0 when unknown), and a newline
 *   (JSON text holds none), so the record a client writes is text; then, once completed, the
 *   response: status (3 digits) | body_omitted ('0' or '1') | the headers' length in bytes (10
 *   digits) | the headers as JSON | the body's bytes, to the end.
 *   A UTF-8 body keeps the whole record text, so the client sends the completion as strings.
 *
 * A string, not a hash, so that the claim of a new key and a replay need no script: the store
 * sends `SET key <fresh record> NX PX <ttl> GET`, which creates the record when the key is free
 * (the reply is nil: acquired) and otherwise returns the existing record unchanged, in one
 * native command (Redis 7.0+). The client does not know the Redis clock, so a record it creates
 * that way is *fresh*: lease_until and expires_at hold the lease and the window as durations, and
 * the fresh TTL the TTL the key was created with. `load` turns a fresh record into an absolute one
 * from the key's remaining TTL (created = now - (ttl - PTTL)), so leases and windows are still
 * decided on the Redis clock alone; every head a script rewrites holds absolute times. The
 * client's own clock at creation is kept only for the client: it lets a client answer a replay
 * from a fresh completed record without a script (see `CLOCK_MARGIN_MS` in claim.ts).
 *
 * The head is fixed-width so that the completion, the one script on every new key's path, checks
 * the owner with string operations and stores the response by flipping the state and appending
 * bytes: no decoding, no number parsing, and no TTL change (`KEEPTTL`) when the lease does not
 * outlast the window (zero-padded digits compare as strings).
 *
 * The times ride at the end of the JSON, as fixed-width digits, so a script rewrites them with
 * string operations (no JSON decoding) and an earlier idemkit, which reads the array by position
 * and keeps what follows, reads and keeps records that have them. A record without them (written
 * by an earlier idemkit, or fresh from a client) has unknown times, except that a fresh record's
 * creation is known from its TTL, and nothing has changed it since but a completion (which adds
 * the times). So a new key's claim stays one `SET … NX GET` and a replay writes nothing.
 *
 * A record ends at `expires_at` once completed, and at max(expires_at, lease_until) while in
 * flight: from then on every script treats it as absent. Its key's TTL is that end plus a grace
 * (ARGV[1] of every script), so Redis deletes it by itself soon after, never under a live lease,
 * while `reap` can still find and delete it sooner, as it does in the SQL stores. A script's own
 * arguments start at ARGV[2].
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

/** The record format: the first byte of every record. A record with another is not read. */
export const RECORD_FORMAT = '3';
/** Bytes of the fixed-width head. */
export const HEAD_BYTES = 108;

// What every script defines: the key, and the check of a record's head (all the completion's usual
// path needs).
const HEAD = `
local k = KEYS[1]
local H = ${HEAD_BYTES}
-- Why \`v\` cannot be a record (never guess at a payment's state), or nil.
local function unreadable(v)
  if #v < H or string.sub(v, 1, 1) ~= '${RECORD_FORMAT}' then return 'not an idemkit record (format ${RECORD_FORMAT})' end
  local state = string.sub(v, 2, 2)
  if state ~= 'I' and state ~= 'C' then return 'unknown state "' .. state .. '"' end
  if not string.match(string.sub(v, 35, H), '^%d+$') then return 'lease_until, expires_at, fresh TTL or attempt is not a number' end
end
-- The rest of a record (from its JSON on) with the times set: updated_at, and created_at unless
-- nil (then the one there is kept, or 0: unknown). The times are the JSON array's last element,
-- ,"<16 digits><16 digits>"] just before the newline; a record without them gets them appended.
-- Nil when the JSON has no end.
local function stamped(rest, created, updated)
  local nl = string.find(rest, '\\n', 1, true)
  if not nl then return nil end
  if nl > 36 and string.match(string.sub(rest, nl - 36, nl - 1), '^,"%d+"%]$') then
    created = created or tonumber(string.sub(rest, nl - 34, nl - 19))
    return string.sub(rest, 1, nl - 35) .. string.format('%016d%016d', created, updated) .. string.sub(rest, nl - 2)
  end
  return string.sub(rest, 1, nl - 2) .. string.format(',"%016d%016d"]', created or 0, updated) .. string.sub(rest, nl)
end
`;

// The helpers the other scripts share.
const HELPERS = `
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
-- Epoch ms and durations are integers far below 2^53: exact as Lua numbers, exact through %d.
local function int(n) return string.format('%d', n) end
local function corrupt(why) return redis.error_reply('${CORRUPT_CODE} ' .. why) end
local function head(state, token, lease_until, expires_at, attempt)
  return string.format('${RECORD_FORMAT}%s%s%016d%016d%016d%010d%016d', state, token, lease_until, expires_at, 0, attempt, 0)
end
-- The record's head as a table with absolute times (v: the whole value), false when there is
-- none, or nil and the reason the value cannot be a record. \`now\` is read only if needed;
-- \`v\` is the value when the caller has already read it.
local function load(now, v)
  v = v or redis.call('GET', k)
  if not v then return false end
  local why = unreadable(v)
  if why then return nil, why end
  local r = { v = v, completed = string.sub(v, 2, 2) == 'C', token = string.sub(v, 3, 34), lease = tonumber(string.sub(v, 35, 50)),
    expires = tonumber(string.sub(v, 51, 66)), attempt = tonumber(string.sub(v, 83, 92)) }
  local fresh = tonumber(string.sub(v, 67, 82))
  if fresh > 0 then
    -- Fresh (created by SET NX from the client): lease and window are durations from the key's creation.
    local ttl = redis.call('PTTL', k)
    if ttl < 0 then return nil, 'a fresh record without its TTL' end
    local created = (now or now_ms()) - (fresh - ttl)
    -- Read exactly from the key's expiry (PEXPIRETIME, Redis 7.0+, which fresh records need):
    -- from the remaining TTL, now and the script's frozen time can put it a millisecond apart
    -- from one read to the next, and so the lease's end (two records' order in admin.list) and,
    -- once a script rewrites the record as absolute, the times it keeps.
    local expiry = redis.pcall('PEXPIRETIME', k)
    if type(expiry) == 'number' and expiry > 0 then created = expiry - fresh end
    r.lease, r.expires, r.created = created + r.lease, created + r.expires, created
  end
  return r
end
-- The record's created_at and updated_at, each nil when unknown. A fresh record's creation comes
-- from its TTL; without times of its own nothing has changed it since.
local function stamps(r)
  local v = r.v
  local nl = string.find(v, '\\n', H + 1, true)
  local created, updated
  if nl and nl > H + 36 and string.match(string.sub(v, nl - 36, nl - 1), '^,"%d+"%]$') then
    created, updated = tonumber(string.sub(v, nl - 34, nl - 19)), tonumber(string.sub(v, nl - 18, nl - 3))
  end
  if r.created then created = r.created end
  if created == 0 then created = nil end
  if updated == nil or updated == 0 then updated = r.created end
  return created, updated
end
-- The variable parts: {fingerprint, scope, key, recovery_point, recovery_data}, and the response
-- {status, headers, body_omitted, body} of a completed record; nil and the reason when unreadable.
local function parts(r)
  local v = r.v
  local nl = string.find(v, '\\n', H + 1, true)
  local ok, rest = pcall(cjson.decode, string.sub(v, H + 1, (nl or 0) - 1))
  if not nl or not ok or type(rest) ~= 'table' or type(rest[1]) ~= 'string' then return nil, 'the fingerprint is missing' end
  if not r.completed then return rest end
  local s = nl + 1
  local status, omitted = string.sub(v, s, s + 2), string.sub(v, s + 3, s + 3)
  local length = string.match(string.sub(v, s + 4, s + 13), '^%d%d%d%d%d%d%d%d%d%d$')
  local body_at = length and s + 14 + tonumber(length)
  if not body_at or body_at > #v + 1 then return nil, 'the response is missing' end
  if not string.match(status, '^%d%d%d$') then return nil, 'status is not an HTTP status code' end
  if omitted ~= '0' and omitted ~= '1' then return nil, 'body_omitted is neither 0 nor 1' end
  return rest, { tonumber(status), string.sub(v, s + 14, body_at - 1), tonumber(omitted), omitted == '0' and string.sub(v, body_at) }
end
-- Gone for every purpose once the window has passed and no live lease holds it.
local function expired(r, now)
  return r.expires <= now and (r.completed or r.lease <= now)
end
-- Writes the record with a TTL that ends \`grace\` after \`ending\` (a time already past deletes it).
local function save(value, ending)
  redis.call('SET', k, value, 'PXAT', int(ending + ARGV[1]))
end
-- Fenced operations act only for the current owner of an in-flight record: returns the record,
-- false, or nil and the reason it is corrupt.
local function owned(token)
  local r, err = load()
  if not r then return r, err end
  if not r.completed and r.token == token then return r end
  return false
end
`;

/**
 * A script: the shared helpers, then `body`. With `lazy`, the helpers are built only when the body
 * calls `helpers()` (a table of them): defining them costs every run a closure each, a tenth of a
 * completion, whose usual path needs none of them.
 */
export function script(name: string, body: string, helpers: 'eager' | 'lazy' = 'eager'): LuaScript {
  const prelude =
    helpers === 'eager'
      ? HEAD + HELPERS
      : `${HEAD}
local function helpers()
${HELPERS}
  return { load = load, save = save, head = head, corrupt = corrupt }
end`;
  const source = `-- idemkit redis store: ${name}\n${prelude}\n${body.trim()}\n`;
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * KEYS[1] record; ARGV[2..7] = fingerprint, new token, leaseMs, windowMs, scope, key.
 * Replies 0 for a new claim, or {'acquired', 1, recovery_point, recovery_data} for a take-over |
 * {'completed', status, headers, body, body_omitted} | {'in_flight', lease left ms, ms since the
 * record last changed (false when unknown)} | {'mismatch'}.
 * A replay, an in-flight answer and a mismatch write nothing. The store runs it when its
 * `SET … NX GET` found a record it cannot decide on without the Redis clock (in flight, near the
 * end of its window, unreadable), or when the server does not take NX with GET (before 7.0).
 */
export const CLAIM = script(
  'claim',
  `
if #ARGV[3] ~= 32 then return redis.error_reply('ERR idemkit: an owner token has 32 characters') end
local now = now_ms()
local r, err = load(now)
if err then return corrupt(err) end
if r and not expired(r, now) then
  local rest, response = parts(r)
  if not rest then return corrupt(response) end
  if rest[1] ~= ARGV[2] then return {'mismatch'} end
  if r.completed then return {'completed', response[1], response[2], response[4], response[3]} end
  if r.lease > now then
    -- How long ago the owner last wrote (claim, renewal, checkpoint), false when unknown.
    local _, updated = stamps(r)
    return {'in_flight', r.lease - now, updated and math.max(0, now - updated) or false}
  end
  -- The same request, and its owner's lease ran out: take over. The window and the recovery
  -- point stay; the new token fences the earlier owner out.
  -- It keeps the request's creation time too.
  local lease_until = now + ARGV[4]
  save(head('I', ARGV[3], lease_until, r.expires, r.attempt + 1) .. stamped(string.sub(r.v, H + 1), r.created, now),
    math.max(r.expires, lease_until))
  return {'acquired', 1, rest[4], rest[5]}
end
-- No record, or its window is over: a new request, with nothing of the old record kept.
local lease_until, expires_at = now + ARGV[4], now + ARGV[5]
save(head('I', ARGV[3], lease_until, expires_at, 1) ..
  cjson.encode({ARGV[2], ARGV[6], ARGV[7], false, false, string.format('%016d%016d', now, now)}) .. '\\n',
  math.max(expires_at, lease_until))
return 0
`,
);

/** KEYS[1]; ARGV[2..3] = token, leaseMs. Replies 1, or 0 when the token is not the current owner. */
export const RENEW = script(
  'renew',
  `
local r, err = owned(ARGV[2])
if err then return corrupt(err) end
if not r then return 0 end
local now = now_ms()
local lease_until = now + ARGV[3]
local rest = stamped(string.sub(r.v, H + 1), r.created, now)
if not rest then return corrupt('the fingerprint is missing') end
-- Past its window an in-flight record lives on its lease alone: the TTL follows the lease.
save(head('I', r.token, lease_until, r.expires, r.attempt) .. rest, math.max(r.expires, lease_until))
return 1
`,
);

/** KEYS[1]; ARGV[2..5] = token, point, has data '1'|'0', data JSON. Replies 1 or 0 (stale token). */
export const CHECKPOINT = script(
  'checkpoint',
  `
local r, err = owned(ARGV[2])
if err then return corrupt(err) end
if not r then return 0 end
local rest, why = parts(r)
if not rest then return corrupt(why) end
rest[4] = ARGV[3]
rest[5] = ARGV[4] == '1' and ARGV[5]
save(head('I', r.token, r.lease, r.expires, r.attempt) .. stamped(cjson.encode(rest) .. '\\n', r.created, now_ms()), math.max(r.expires, r.lease))
return 1
`,
);

/**
 * KEYS[1]; ARGV[2..3] = token, the response as the client encoded it (status, body_omitted, the
 * headers' length, headers, body). Replies 1, 0 (stale token), or 2 when this token's
 * completion is already stored: a retried completion whose first attempt landed but whose reply
 * was lost. The whole response is written at once or not at all; the rest is kept as bytes.
 */
export const COMPLETE = script(
  'complete',
  `
local v = redis.call('GET', k)
if not v then return 0 end
local why = unreadable(v)
if why then return helpers().corrupt(why) end
if string.sub(v, 3, 34) ~= ARGV[2] then return 0 end
if string.sub(v, 2, 2) == 'C' then return 2 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- Completed, the lease no longer matters: the record ends with its window. When the lease does
-- not outlast the window (in either form, as durations or as times), the TTL already ends there.
-- A fresh record stays fresh (its creation is read from its TTL), so its created_at stays 0.
if string.sub(v, 35, 50) <= string.sub(v, 51, 66) then
  local rest = stamped(string.sub(v, H + 1), nil, now)
  if not rest then return helpers().corrupt('the fingerprint is missing') end
  redis.call('SET', k, '${RECORD_FORMAT}C' .. string.sub(v, 3, H) .. rest .. ARGV[3], 'KEEPTTL')
else
  local h = helpers()
  local r = h.load(now, v)
  local rest = stamped(string.sub(v, H + 1), r.created, now)
  if not rest then return h.corrupt('the fingerprint is missing') end
  h.save(h.head('C', r.token, r.lease, r.expires, r.attempt) .. rest .. ARGV[3], r.expires)
end
return 1
`,
  'lazy',
);

/** KEYS[1]; ARGV[2] = token. Deletes an in-flight record of this owner. Replies 1 or 0 (stale token). */
export const RELEASE = script(
  'release',
  `
local r, err = owned(ARGV[2])
if err then return corrupt(err) end
if not r then return 0 end
redis.call('DEL', k)
return 1
`,
);

/**
 * KEYS[1]. Replies nil, or the record's state, fingerprint, lease_until, expires_at, recovery_point,
 * recovery_data, status, headers, body, body_omitted, created_at and updated_at (false when
 * unknown). Writes nothing.
 */
export const READ = script(
  'read',
  `
local r, err = load()
if err then return corrupt(err) end
if not r then return false end
local rest, response = parts(r)
if not rest then return corrupt(response) end
response = response or {}
local created, updated = stamps(r)
return {r.completed and 'completed' or 'in_flight', rest[1], r.lease, r.expires, rest[4], rest[5],
  response[1] or false, response[2] or false, response[4] or false, response[3] or false, created or false, updated or false}
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
if redis.call('TYPE', k).ok ~= 'string' then return 0 end
local now = now_ms()
local r = load(now)
if r and expired(r, now) then
  redis.call('DEL', k)
  return 1
end
return 0
`,
);
