/**
 * `store.admin` of the Redis store. Records are keys under the store's prefix, hashed, so `list`
 * and `stats` SCAN the prefix on every master (never KEYS) and read each record with a script on
 * the Redis clock; `inspect` and `purge` are one script on one key. A pass over the keyspace:
 * for an operator, not for a request's path.
 */
import { CorruptRecordError } from '../../core/errors.js';
import type { IdempotencyRecord, PurgeOutcome, RecordDetails, RecordRef, RecordSummary, StoreAdmin, StoredResponse } from '../../core/store.js';
import type { RedisArgument } from '../../drivers/redis.js';
import type { StoreClient } from './client.js';
import { isExpiredAt, summarize, walkingAdmin } from '../shared/admin.js';
import type { LuaScript } from './lua.js';
import { script } from './lua.js';
import { scanKeys } from './keys.js';
import { text } from './reply.js';

/**
 * KEYS[1]; ARGV[2] = '1' for the body, '0' for its length only. Replies false (no record, or a
 * key of another type under the prefix), or the record's state, fingerprint, lease_until,
 * expires_at, recovery_point, recovery_data, status, headers, body (or its length), body_omitted,
 * scope, key, the token's first 8 characters, attempt, the Redis clock, the value's length,
 * created_at and updated_at (false when unknown).
 */
export const ADMIN_READ = script(
  'admin read',
  `
if redis.call('TYPE', k).ok ~= 'string' then return false end
local now = now_ms()
local r, err = load(now)
if err then return corrupt(err) end
if not r then return false end
local rest, response = parts(r)
if not rest then return corrupt(response) end
response = response or {}
local body = response[4] or false
if body and ARGV[2] ~= '1' then body = #body end
local created, updated = stamps(r)
return {r.completed and 'completed' or 'in_flight', rest[1], r.lease, r.expires, rest[4], rest[5],
  response[1] or false, response[2] or false, body, response[3] or false,
  rest[2], rest[3], string.sub(r.token, 1, 8), r.attempt, now, #r.v, created or false, updated or false}
`,
);

/** KEYS[1] (any key: it picks the Cluster node). Replies the Redis clock in epoch ms. */
export const ADMIN_NOW = script('admin now', 'return now_ms()');

/** KEYS[1]; ARGV[2] = '1' to delete a record in flight too. Replies 1 (deleted), 0 (none), 2 (in flight, kept). */
export const ADMIN_PURGE = script(
  'admin purge',
  `
local r, err = load()
if err then return corrupt(err) end
if not r then return 0 end
if not r.completed and ARGV[2] ~= '1' then return 2 end
redis.call('DEL', k)
return 1
`,
);

export interface RedisAdminAccess {
  readonly client: StoreClient;
  /** The SCAN pattern of every record key under the prefix. */
  readonly pattern: string;
  readonly keyOf: (ref: RecordRef) => string;
  /** The store's script runner (EVALSHA, EVAL on a cold cache; corrupt records named). */
  readonly run: (script: LuaScript, key: string, ref: RecordRef | undefined, args: RedisArgument[]) => Promise<unknown>;
}

export function redisAdmin(a: RedisAdminAccess): StoreAdmin {
  const sizes = new WeakMap<RecordSummary, number>();
  const read = async (key: string, ref: RecordRef | undefined, withBody: boolean): Promise<RecordDetails | undefined> => {
    const reply = await a.run(ADMIN_READ, key, ref, [withBody ? '1' : '0']);
    return Array.isArray(reply) ? toDetails(key, reply, withBody) : undefined;
  };
  const summary = async (key: string): Promise<RecordSummary | undefined> => {
    const reply = await a.run(ADMIN_READ, key, undefined, ['0']);
    if (!Array.isArray(reply)) return undefined;
    const details = toDetails(key, reply, false);
    const s: RecordSummary = { ...summarize(details), bodyBytes: details.state === 'completed' && reply[9] !== 1 ? Number(reply[8]) : null };
    sizes.set(s, Number(reply[15]));
    return s;
  };
  return walkingAdmin({
    // A script, not TIME: under enableAutoPipelining ioredis' callBuffer loses the command name.
    now: async () => Number(await a.run(ADMIN_NOW, a.keyOf({ scope: '', key: '' }), undefined, [])),
    async *each() {
      for await (const found of scanKeys(a.client, a.pattern, 'admin scan')) {
        // A key SCAN returned may be gone by the time it is read: then it is not listed.
        for (const s of await Promise.all(found.map(summary))) if (s) yield s;
      }
    },
    inspect: (ref) => read(a.keyOf(ref), ref, true),
    async purge(ref, force): Promise<PurgeOutcome> {
      const reply = await a.run(ADMIN_PURGE, a.keyOf(ref), ref, [force ? '1' : '0']);
      return reply === 1 ? 'purged' : reply === 2 ? 'in_flight' : 'not_found';
    },
    storageBytes: (record) => sizes.get(record) ?? 0,
  });
}

function toDetails(redisKey: string, f: unknown[], withBody: boolean): RecordDetails {
  const at = (why: string) => new CorruptRecordError(`redis store: the record at Redis key "${redisKey}" cannot be read: ${why}`);
  const state = text(f[0]);
  if (state !== 'in_flight' && state !== 'completed') throw at(`unknown state ${JSON.stringify(state)}`);
  const omitted = f[9] === 1;
  let response: StoredResponse | undefined;
  if (state === 'completed') {
    const headers = JSON.parse(text(f[7]) ?? '[]') as Array<[string, string]>;
    // Listing reads the body's length only (the summary takes it from the reply).
    const body = omitted || !withBody ? null : new Uint8Array(Buffer.isBuffer(f[8]) ? f[8] : Buffer.alloc(0));
    response = { status: Number(f[6]), headers, body, bodyOmitted: omitted };
  }
  const now = Number(f[14]);
  const record: IdempotencyRecord = {
    scope: text(f[10]) ?? '',
    key: text(f[11]) ?? '',
    state,
    fingerprint: text(f[1]) ?? '',
    leaseUntil: Number(f[2]),
    expiresAt: Number(f[3]),
    recoveryPoint: text(f[4]),
    recoveryData: f[5] == null || f[5] === false ? undefined : (JSON.parse(text(f[5]) ?? 'null') as unknown),
    response,
  };
  return {
    ...record,
    tokenPrefix: text(f[12]) ?? '',
    attempt: Number(f[13]),
    now,
    expired: isExpiredAt(record, now),
    // Unknown (false) in a record an earlier idemkit wrote.
    createdAt: typeof f[16] === 'number' ? f[16] : null,
    updatedAt: typeof f[17] === 'number' ? f[17] : null,
  };
}
