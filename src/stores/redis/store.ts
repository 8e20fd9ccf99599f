import { LeaseLostError, StoreUnavailableError } from '../../core/errors.js';
import type { AdministrableStore, IdempotencyRecord, IdempotencyStore, RecordRef, StoredResponse } from '../../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, fitResponse } from '../../core/store.js';
import type { IdempotencyLogger } from '../../core/logger.js';
import { consoleLogger } from '../../core/logger.js';
import { optionReader } from '../../core/option-reader.js';
import { checkRecordRef } from '../../core/validate.js';
import type { NodeRedisClient, NodeRedisCluster, RedisBufferClient, RedisClient as DriverRedisClient } from '../../drivers/redis.js';
import { redisAdmin } from './admin.js';
import { claim, ms } from './claim.js';
import { clientProblem, storeClient, warnAboutClient } from './client.js';
import type { RedisContext } from './context.js';
import { fencedScript, runScript } from './context.js';
import { redisRecordKey, scanKeys } from './keys.js';
import { CHECKPOINT, COMPLETE, READ, REAP, RELEASE, RENEW } from './lua.js';
import { jsonPairs } from './json-text.js';
import { encodeResponse } from './record.js';
import { corrupt, parseInteger, parseJson, parseResponse, text } from './reply.js';
import { verify } from './verify.js';

/**
 * The part of an ioredis client the store uses. Replies must keep bulk strings as Buffers:
 * response bodies are bytes, not text.
 */
export type RedisCommandClient = Required<Pick<DriverRedisClient, 'callBuffer'>>;

/**
 * What the store accepts: an ioredis `Redis` or `Cluster` (`callBuffer`, Buffer replies; `nodes`
 * on a Cluster, so `reap` scans each master; `stream` on a standalone client, so
 * `coalesceWrites` can cork its socket), or a node-redis 5/6 client (`createClient()`) or Cluster
 * (`createCluster()`), asked for Buffer replies per command through `typeMapping`.
 */
export type RedisClient = RedisBufferClient | NodeRedisClient | NodeRedisCluster;

export interface RedisStoreOptions {
  /**
   * An ioredis `Redis` or `Cluster`, or a node-redis 5/6 `createClient()` or `createCluster()`,
   * created (and connected) by the caller. Required. Recommended settings, and why, are in
   * docs/stores/redis.md (ioredis: `enableOfflineQueue: false`, `maxRetriesPerRequest: 0`;
   * node-redis: `disableOfflineQueue: true`); a client that would queue commands while Redis is
   * down, or resend them more than once after a reconnect, is named in one warning to `logger`
   * when the store is made.
   */
  readonly client: RedisClient;
  /**
   * Start of every record key (`<prefix>:{<sha256>}`). Letters, digits, `_ - . :` only: it is
   * also a SCAN pattern and must not contain a hash tag.
   * @default 'idemkit'
   */
  readonly prefix?: string;
  /** @default 1_048_576 */
  readonly maxResponseBytes?: number;
  /**
   * How long Redis keeps a record after it expired (window over, no live lease) before deleting
   * it itself. Meanwhile claims treat it as absent, `get` still shows it, and `reap` deletes it.
   * So `reap` is optional with Redis: it never has to run for memory to be reclaimed.
   * @default 60_000
   */
  readonly graceMs?: number;
  /**
   * How long a completion that cannot reach Redis (connection cut, restart, failover) is retried,
   * in ms. A lost completion leaves the record in flight, so a retry of the request would run the
   * handler again after the lease; retrying is safe because the completion is fenced. 0 disables.
   * @default 10_000
   */
  readonly completeRetryMs?: number;
  /**
   * Hold the client's socket writes until the end of the event-loop turn (cork, then uncork in
   * `setImmediate`), so the commands of every request served in one turn leave in one write, as
   * node-redis does by default. Under load this saves a system call per command; an idle server
   * sends a command a fraction of a millisecond later. Standalone ioredis clients only (a
   * Cluster's commands go through its node clients and are sent as they come; node-redis
   * already writes one turn's commands together).
   * @default true
   */
  readonly coalesceWrites?: boolean;
  /**
   * How long `verify()` waits for Redis before it rejects with `StoreUnavailableError`, in ms:
   * its own deadline, whatever the client does meanwhile (ioredis's defaults queue a command
   * while disconnected and resend it 20 times, which made a verify() of an unreachable server take
   * over a minute). Each of its commands is one round trip; a Cluster's masters answer in parallel.
   * @default 5_000
   */
  readonly verifyTimeoutMs?: number;
  /** Where the store's one warning about the client's settings goes (`{ warn, error }`: console, pino, …). @default console */
  readonly logger?: IdempotencyLogger;
}

export interface RedisStore extends IdempotencyStore, AdministrableStore {
  /** The Redis key that holds the record of `ref`. */
  keyOf(ref: RecordRef): string;
  /**
   * Checks, without writing a record, that Redis can run this store: every master answers PING,
   * runs Redis 5 or later (the scripts read `TIME` before they write), and loads every script
   * (`SCRIPT LOAD`, refused when an ACL forbids scripting or `rename-command` disabled it); a
   * read-only script runs on a key under the prefix (refused when the ACL user's key patterns
   * leave the prefix out); the client adds no `keyPrefix`; on a Cluster, the server puts a record
   * key on the slot of its hash tag, as the client routes it. Throws `StoreUnavailableError` when
   * Redis does not answer, `StoreIncompatibleError` (its `reason` says what) otherwise; each
   * message names the problem and the fix. Call it at start-up, after `client.connect()`.
   */
  verify(): Promise<void>;
}

const PREFIX = /^[A-Za-z0-9_.:-]{1,64}$/;
// Redis refuses bulk strings over 512 MiB (proto-max-bulk-len), and a completion sends the body
// with the response's headers in one: a bigger limit could never be written.
const MAX_BODY_LIMIT = 511 * 1024 * 1024;

/**
 * The Redis store on ioredis or node-redis (standalone or Cluster): the client is resolved once,
 * here (client.ts), into the one way each command is sent. Every operation is one command: the claim
 * of a new key and a replay a native `SET … NX GET` (claim.ts), every other decision one EVALSHA
 * of a Lua script (lua.ts) on the Redis clock. A record is one string (a fixed head, JSON, then the
 * response with a fixed head of its own; record.ts) with a TTL. Not transactional: see
 * docs/stores/redis.md for what that means and how to pair it with a data-layer guard.
 */
export function redisStore(options: RedisStoreOptions): RedisStore {
  const read = optionReader('redisStore()', options);
  const given = read.driver('client', [], 'an ioredis Redis or Cluster, or a node-redis (5 or later) createClient() or createCluster()', { refuse: clientProblem });
  const prefix = read.value('prefix') ?? 'idemkit';
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) {
    read.fail('prefix', `expected 1 to 64 letters, digits, "_", "-", "." or ":" (no spaces, braces or control characters), got ${JSON.stringify(prefix)}`);
  }
  const maxResponseBytes = read.integer('maxResponseBytes', { default: DEFAULT_MAX_RESPONSE_BYTES });
  if (maxResponseBytes > MAX_BODY_LIMIT) read.fail('maxResponseBytes', `Redis cannot store more than ${MAX_BODY_LIMIT} bytes`);
  const grace = read.integer('graceMs', { default: 60_000 });
  const completeRetryMs = read.integer('completeRetryMs', { default: 10_000 });
  const client = storeClient(given, read.boolean('coalesceWrites', { default: true }));
  const verifyTimeoutMs = read.duration('verifyTimeoutMs', { default: 5_000, min: 1 });
  const logger = read.driver('logger', ['warn', 'error'], 'a logger with warn() and error() (console, pino, …)', { optional: true }) ?? consoleLogger;
  read.done();
  warnAboutClient(given, client, logger);
  // The engine passes one ref object to the claim and to the completion: hash it once.
  const keys = new WeakMap<RecordRef, string>();
  const keyOf = (ref: RecordRef) => {
    let key = keys.get(ref);
    if (key === undefined) keys.set(ref, (key = redisRecordKey(prefix, ref)));
    return key;
  };
  // Every record key: `<prefix>:{` + 64 hex digits + `}`. The prefix holds no glob characters.
  const pattern = `${prefix}:{${'[0-9a-f]'.repeat(64)}}`;
  const c: RedisContext = { client, prefix, maxResponseBytes, grace, graceMs: String(grace), completeRetryMs, verifyTimeoutMs, coalesce: client.coalescer, keyOf, setNxGet: true };

  return {
    name: 'redis',
    maxResponseBytes,
    keyOf,
    verify: () => verify(c),
    claim: (ref, fingerprint, o) => claim(c, ref, fingerprint, o),
    // 0 ends the lease now (how ctx.suspend() gives it back): a claim of the same request takes over at once.
    async renew(ref, token, leaseMs) {
      checkRecordRef(ref);
      return (await runScript(c, RENEW, keyOf(ref), ref, [token, ms('leaseMs', leaseMs, 0)])) === 1;
    },
    async checkpoint(ref, token, point, data) {
      checkRecordRef(ref);
      const json = data === undefined ? undefined : JSON.stringify(data);
      await fencedScript(c, CHECKPOINT, ref, json === undefined ? [token, point, '0'] : [token, point, '1', json]);
    },
    complete: (ref, token, response) => complete(c, ref, token, response),
    async release(ref, token) {
      checkRecordRef(ref);
      await fencedScript(c, RELEASE, ref, [token]);
    },
    get: (ref) => get(c, ref),
    reap: (limit) => reap(c, pattern, limit),
    admin: redisAdmin({ client, pattern, keyOf, run: (script, key, ref, args) => runScript(c, script, key, ref, args) }),
  };
}

/**
 * The completion is the one write whose loss can repeat an effect: the handler has run, and a
 * record left in flight lets a retry run it again once the lease ends. So a completion that
 * fails to reach Redis is retried with backoff for `completeRetryMs`. The script is fenced by
 * the token, and answers 2 when an earlier attempt of this call landed but its reply was lost.
 */
async function complete(c: RedisContext, ref: RecordRef, token: string, response: StoredResponse): Promise<void> {
  checkRecordRef(ref);
  const fitted = fitResponse(response, c.maxResponseBytes);
  const args = [token, encodeResponse(fitted.status, jsonPairs(fitted.headers), fitted.body)];
  const key = c.keyOf(ref);
  const deadline = Date.now() + c.completeRetryMs;
  for (let attempt = 0; ; attempt++) {
    let reply: unknown;
    try {
      reply = await runScript(c, COMPLETE, key, ref, args);
    } catch (error) {
      if (!(error instanceof StoreUnavailableError) || Date.now() >= deadline) throw error;
      await delay(Math.min(25 * 2 ** attempt, 1_000, deadline - Date.now()));
      continue;
    }
    if (reply === 1 || (reply === 2 && attempt > 0)) return;
    throw new LeaseLostError();
  }
}

async function get(c: RedisContext, ref: RecordRef): Promise<IdempotencyRecord | undefined> {
  checkRecordRef(ref);
  const key = c.keyOf(ref);
  const reply = await runScript(c, READ, key, ref, []);
  if (reply === null) return undefined;
  const f = Array.isArray(reply) ? reply : [];
  const at = (reason: string) => corrupt(key, ref, reason);
  const state = text(f[0]);
  if (state !== 'in_flight' && state !== 'completed') throw at(`unknown state ${JSON.stringify(state)}`);
  return {
    scope: ref.scope,
    key: ref.key,
    state,
    fingerprint: text(f[1]) ?? '',
    leaseUntil: parseInteger(f[2], 'lease_until', at),
    expiresAt: parseInteger(f[3], 'expires_at', at),
    recoveryPoint: text(f[4]),
    recoveryData: f[5] == null ? undefined : parseJson(f[5], 'recovery_data', at),
    response: state === 'completed' ? parseResponse(f.slice(6, 10), at) : undefined,
    // nil (the script's false) when unknown: a record an earlier idemkit wrote.
    createdAt: f[10] == null ? undefined : parseInteger(f[10], 'created_at', at),
    updatedAt: f[11] == null ? undefined : parseInteger(f[11], 'updated_at', at),
  };
}

/**
 * Redis deletes expired records itself (`graceMs` after they expire); reap removes them sooner.
 * It SCANs the prefix on every master, so it costs a pass over the keyspace: run it rarely, if
 * at all. Each deletion re-checks expiry on the Redis clock, so a live record is never taken.
 */
async function reap(c: RedisContext, pattern: string, limit = 1000): Promise<number> {
  let reaped = 0;
  for await (const found of scanKeys(c.client, pattern, 'reap')) {
    // In batches no larger than what is left of `limit`, so a batch can never overshoot it.
    while (found.length > 0 && reaped < limit) {
      const batch = found.splice(0, limit - reaped);
      const done = await Promise.all(batch.map((k) => runScript(c, REAP, k, undefined, [])));
      reaped += done.filter((d) => d === 1).length;
    }
    if (reaped >= limit) return reaped;
  }
  return reaped;
}

/** An unref'd timer: a completion still retrying must not keep a shutting-down process alive. */
function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)).unref());
}
