import { hash } from 'node:crypto';
import { CorruptRecordError, InvalidOptionError, LeaseLostError, StoreIncompatibleError, StoreUnavailableError } from '../../core/errors.js';
import type { AdministrableStore, Claim, ClaimOptions, IdempotencyRecord, IdempotencyStore, RecordRef, StoredResponse } from '../../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, fitResponse } from '../../core/store.js';
import { newOwnerToken } from '../../core/token.js';
import type { IdempotencyLogger } from '../../core/logger.js';
import { consoleLogger } from '../../core/logger.js';
import { optionReader } from '../../core/option-reader.js';
import { checkRecordRef } from '../../core/validate.js';
import type { RedisArgument, RedisBufferClient, RedisClient as DriverRedisClient } from '../../drivers/redis.js';
import { evalScript, sendBuffer, writeCoalescer } from '../../drivers/redis.js';
import { redisAdmin } from './admin.js';
import type { LuaScript } from './lua.js';
import { CHECKPOINT, CLAIM, COMPLETE, CORRUPT_CODE, READ, REAP, RELEASE, RENEW } from './lua.js';

/** Every script the store runs: what `verify()` loads on each master. */
const SCRIPTS: readonly LuaScript[] = [CLAIM, RENEW, CHECKPOINT, COMPLETE, RELEASE, READ, REAP];
import { decodeRecord, encodeFreshRecord, encodeResponse } from './record.js';
import { headersProblem, isHttpStatus } from '../shared/stored-response.js';

/**
 * The part of an ioredis client the store uses. Replies must keep bulk strings as Buffers:
 * response bodies are bytes, not text.
 */
export type RedisCommandClient = Required<Pick<DriverRedisClient, 'callBuffer'>>;

/**
 * What the store accepts: an ioredis `Redis` or `Cluster` (`callBuffer`, Buffer replies). `nodes`
 * exists on a Cluster (`reap` scans each master); `stream`, on a standalone client, lets
 * `coalesceWrites` cork its socket. A node-redis client does not fit: the store needs Buffer replies.
 */
export type RedisClient = RedisBufferClient;

export interface RedisStoreOptions {
  /**
   * An ioredis `Redis` or `Cluster`, created by the caller. Required. Recommended settings, and
   * why, are in docs/stores/redis.md (`enableOfflineQueue: false`, `maxRetriesPerRequest: 0`);
   * a client that would queue commands while Redis is down, or resend them more than once after
   * a reconnect, is named in one warning to `logger` when the store is made.
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
   * sends a command a fraction of a millisecond later. Standalone clients only (a Cluster's
   * commands go through its node clients and are sent as they come).
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
const SCAN_COUNT = 500;
// How far inside its window a record returned by `SET … NX GET` must be, by this process's clock,
// for the client to answer from it (replay, mismatch) without asking the Redis clock. Closer to
// the end, a script decides. The window's end is on the Redis clock, or, for a record still in
// its fresh form, estimated on the clock of the process that created it. A clock that is off by
// more than this can only make a replay come slightly after the window: never a second execution,
// which only a script can grant.
const CLOCK_MARGIN_MS = 5_000;

/**
 * The Redis key of a record. The pair is hashed: braces in a scope or key cannot break the
 * `{…}` hash tag, and JSON of the pair is injective, so two pairs never share a key. The tag
 * keeps any future companion key of a record on the record's Cluster slot.
 */
export function redisRecordKey(prefix: string, ref: RecordRef): string {
  return `${prefix}:{${hash('sha256', JSON.stringify([ref.scope, ref.key]), 'hex')}}`;
}

/**
 * The Redis store on ioredis (standalone or Cluster). Every operation is one command: the claim
 * of a new key and a replay a native `SET … NX GET`, every other decision one EVALSHA of a Lua
 * script on the Redis clock. A record is one string (a fixed head, JSON, then the response with
 * a fixed head of its own) with a TTL. Not transactional: see docs/stores/redis.md for what that
 * means and how to pair it with a data-layer guard.
 */
export function redisStore(options: RedisStoreOptions): RedisStore {
  const read = optionReader('redisStore()', options);
  const client = read.driver('client', ['callBuffer'], 'an ioredis Redis or Cluster client', { refuse: notIoredis });
  const prefix = read.value('prefix') ?? 'idemkit';
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) {
    read.fail('prefix', `expected 1 to 64 letters, digits, "_", "-", "." or ":" (no spaces, braces or control characters), got ${JSON.stringify(prefix)}`);
  }
  const maxResponseBytes = read.integer('maxResponseBytes', { default: DEFAULT_MAX_RESPONSE_BYTES });
  if (maxResponseBytes > MAX_BODY_LIMIT) read.fail('maxResponseBytes', `Redis cannot store more than ${MAX_BODY_LIMIT} bytes`);
  const grace = read.integer('graceMs', { default: 60_000 });
  const graceMs = String(grace);
  const completeRetryMs = read.integer('completeRetryMs', { default: 10_000 });
  const coalesce = read.boolean('coalesceWrites', { default: true }) ? writeCoalescer(client) : undefined;
  const verifyTimeoutMs = read.duration('verifyTimeoutMs', { default: 5_000, min: 1 });
  const logger = read.driver('logger', ['warn', 'error'], 'a logger with warn() and error() (console, pino, …)', { optional: true }) ?? consoleLogger;
  read.done();
  warnAboutClient(client, logger);
  // The engine passes one ref object to the claim and to the completion: hash it once.
  const keys = new WeakMap<RecordRef, string>();
  const keyOf = (ref: RecordRef) => {
    let key = keys.get(ref);
    if (key === undefined) keys.set(ref, (key = redisRecordKey(prefix, ref)));
    return key;
  };
  // Every record key: `<prefix>:{` + 64 hex digits + `}`. The prefix holds no glob characters.
  const pattern = `${prefix}:{${'[0-9a-f]'.repeat(64)}}`;

  /** Runs one script on one record: EVALSHA, or EVAL when the server has lost its script cache. */
  async function run(script: LuaScript, key: string, ref: RecordRef | undefined, args: RedisArgument[]): Promise<unknown> {
    try {
      return await evalScript(script, (command, shaOrSource) => {
        if (command === 'evalsha') coalesce?.();
        return sendBuffer(client, command, [shaOrSource, 1, key, graceMs, ...args]);
      });
    } catch (error) {
      const message = messageOf(error);
      if (message.startsWith(CORRUPT_CODE)) throw corrupt(key, ref, message.slice(CORRUPT_CODE.length).trim());
      if (message.startsWith('WRONGTYPE')) throw corrupt(key, ref, WRONG_TYPE);
      throw new StoreUnavailableError(`redis store: ${script.name} failed: ${message}`, { cause: error });
    }
  }

  async function fenced(script: LuaScript, ref: RecordRef, args: RedisArgument[]): Promise<void> {
    if ((await run(script, keyOf(ref), ref, args)) !== 1) throw new LeaseLostError();
  }

  /**
   * The completion is the one write whose loss can repeat an effect: the handler has run, and a
   * record left in flight lets a retry run it again once the lease ends. So a completion that
   * fails to reach Redis is retried with backoff for `completeRetryMs`. The script is fenced by
   * the token, and answers 2 when an earlier attempt of this call landed but its reply was lost.
   */
  async function complete(ref: RecordRef, token: string, response: StoredResponse): Promise<void> {
    checkRecordRef(ref);
    const fitted = fitResponse(response, maxResponseBytes);
    const args = [token, encodeResponse(fitted.status, JSON.stringify(fitted.headers), fitted.body)];
    const key = keyOf(ref);
    const deadline = Date.now() + completeRetryMs;
    for (let attempt = 0; ; attempt++) {
      let reply: unknown;
      try {
        reply = await run(COMPLETE, key, ref, args);
      } catch (error) {
        if (!(error instanceof StoreUnavailableError) || Date.now() >= deadline) throw error;
        await delay(Math.min(25 * 2 ** attempt, 1_000, deadline - Date.now()));
        continue;
      }
      if (reply === 1 || (reply === 2 && attempt > 0)) return;
      throw new LeaseLostError();
    }
  }

  // Off when the server refuses SET with both NX and GET (before Redis 7.0): every claim is a script.
  let setNxGet = true;

  /**
   * The claim of a new key and a replay are one native command: `SET key <fresh record> NX PX
   * <ttl> GET` creates the record when the key is free (nil: acquired) and otherwise returns the
   * record unchanged. The client answers from it only where the Redis clock is not needed (a
   * completed or a differing record well inside its window); anything else (in flight, near or past
   * the window's end, a record it cannot decode) goes to the claim script, which decides on the
   * Redis clock. Undefined means: ask the script.
   */
  async function claimBySet(key: string, ref: RecordRef, fingerprint: string, token: string, o: ClaimOptions): Promise<Claim | undefined> {
    const ttlMs = Math.max(o.leaseMs, o.windowMs) + grace;
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
      coalesce?.();
      reply = await sendBuffer(client, 'set', [key, fresh, 'PX', ttlMs, 'NX', 'GET']);
    } catch (error) {
      const message = messageOf(error);
      if (message.startsWith('WRONGTYPE')) throw corrupt(key, ref, WRONG_TYPE);
      if (/syntax error/i.test(message)) {
        setNxGet = false; // the command did not run
        return undefined;
      }
      throw new StoreUnavailableError(`redis store: claim failed: ${message}`, { cause: error });
    }
    if (reply === null) return { kind: 'acquired', token, takeover: false };
    const record = Buffer.isBuffer(reply) ? decodeRecord(reply) : undefined;
    if (record === undefined || record.expiresAt - Date.now() <= CLOCK_MARGIN_MS) return undefined;
    if (record.fingerprint !== fingerprint) return { kind: 'mismatch' };
    if (!record.completed) return undefined;
    const [status, headers, omitted, body] = record.response!;
    return { kind: 'completed', response: parseResponse([status, headers, body, omitted], (reason) => corrupt(key, ref, reason)) };
  }

  async function claim(ref: RecordRef, fingerprint: string, o: ClaimOptions): Promise<Claim> {
    // A lone surrogate has no UTF-8 form: the record's JSON would hold a scope Lua cannot read back.
    checkRecordRef(ref);
    const key = keyOf(ref);
    const token = newOwnerToken();
    const leaseMs = ms('leaseMs', o.leaseMs, 1);
    const windowMs = ms('windowMs', o.windowMs, 1);
    if (setNxGet) {
      const decided = await claimBySet(key, ref, fingerprint, token, o);
      if (decided !== undefined) return decided;
    }
    const reply = await run(CLAIM, key, ref, [fingerprint, token, leaseMs, windowMs, ref.scope, ref.key]);
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
        return { kind: 'in_flight', retryAfterMs: Math.max(1, Number(parts[1])) };
      case 'mismatch':
        return { kind: 'mismatch' };
      default:
        throw new StoreUnavailableError(`redis store: unexpected claim reply for ${key}`);
    }
  }

  async function get(ref: RecordRef): Promise<IdempotencyRecord | undefined> {
    checkRecordRef(ref);
    const key = keyOf(ref);
    const reply = await run(READ, key, ref, []);
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
  async function reap(limit = 1000): Promise<number> {
    let reaped = 0;
    const nodes = typeof client.nodes === 'function' ? client.nodes('master') : [client];
    for (const node of nodes) {
      let cursor = '0';
      do {
        let reply: unknown;
        try {
          reply = await sendBuffer(node, 'scan', [cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT]);
        } catch (error) {
          throw new StoreUnavailableError(`redis store: reap failed: ${messageOf(error)}`, { cause: error });
        }
        const [next, keys] = Array.isArray(reply) ? reply : [];
        cursor = text(next) ?? '0';
        const found = Array.isArray(keys) ? keys.map((k) => text(k) ?? '') : [];
        // In batches no larger than what is left of `limit`, so a batch can never overshoot it.
        while (found.length > 0 && reaped < limit) {
          const batch = found.splice(0, limit - reaped);
          const done = await Promise.all(batch.map((k) => run(REAP, k, undefined, [])));
          reaped += done.filter((d) => d === 1).length;
        }
        if (reaped >= limit) return reaped;
      } while (cursor !== '0');
    }
    return reaped;
  }

  /** One command of `verify()` on `node`: its reply, or the typed error that says what to fix. */
  async function ask(node: RedisCommandClient, command: 'ping' | 'info' | 'script' | 'evalsha' | 'cluster', args: RedisArgument[], what: string): Promise<unknown> {
    try {
      return await sendBuffer(node, command, args);
    } catch (error) {
      throw refusal(messageOf(error), addressOf(node), what, prefix, error);
    }
  }

  async function verifyNode(node: RedisCommandClient): Promise<void> {
    const where = addressOf(node);
    try {
      await sendBuffer(node, 'ping', []);
    } catch (error) {
      throw new StoreUnavailableError(
        `redis store: Redis at ${where} does not answer PING (${messageOf(error)}); check that Redis runs there, that the client was given that address and its credentials, and that it is connected (with enableOfflineQueue: false, await client.connect() before verify())`,
        { cause: error },
      );
    }
    let info: string | undefined;
    try {
      info = text(await sendBuffer(node, 'info', ['server']));
    } catch (error) {
      // An ACL may refuse INFO (@dangerous): the version is then not known, and the scripts still load below.
      if (!/^NOPERM\b/.test(messageOf(error))) throw refusal(messageOf(error), where, 'INFO', prefix, error);
    }
    const version = /^redis_version:(\d+)\.(\d+)/m.exec(info ?? '');
    if (version !== null && Number(version[1]) < 5) {
      throw new StoreIncompatibleError(
        'server-version',
        `redis store: Redis at ${where} is version ${version[1]}.${version[2]}; the store needs Redis 5 or later (its scripts read TIME before they write, which older servers refuse); upgrade the server`,
      );
    }
    for (const s of SCRIPTS) {
      const sha = text(await ask(node, 'script', ['LOAD', s.source], `SCRIPT LOAD (the ${s.name} script)`));
      if (sha !== s.sha) throw new StoreUnavailableError(`redis store: Redis at ${where} answered SCRIPT LOAD of the ${s.name} script with ${JSON.stringify(sha)}, not its SHA-1 ${s.sha}`);
    }
  }

  /** `check`, within `verifyTimeoutMs` whatever the client does with its commands meanwhile. */
  async function verify(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const queued = queuesOffline(client) ? '; the client queues commands while it is disconnected (enableOfflineQueue), so they were waiting for a connection' : '';
        reject(
          new StoreUnavailableError(
            `redis store: verify() got no answer from Redis at ${addressOf(client)} within ${verifyTimeoutMs} ms (option \`verifyTimeoutMs\`)${queued}; check that Redis runs there, that the client was given that address and its credentials, and that it is connected (await client.connect() before verify())`,
          ),
        );
      }, verifyTimeoutMs);
    });
    try {
      // A check that settles after the deadline is ignored: race has handled its outcome.
      return await Promise.race([check(), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  async function check(): Promise<void> {
    const rewriting = keyPrefixOf(client);
    if (rewriting !== undefined) {
      throw new StoreIncompatibleError(
        'key-prefix',
        `redis store: the ioredis client adds keyPrefix ${JSON.stringify(rewriting)} to every key, so the store's keys are not the ones reap scans for (and a brace in it would move every record onto one Cluster slot); remove keyPrefix from the client's options and give the store \`prefix\` instead`,
      );
    }
    const cluster = typeof client.nodes === 'function';
    const nodes = cluster ? client.nodes!('master') : [client];
    if (nodes.length === 0) {
      throw new StoreUnavailableError('redis store: the Cluster client knows no master node; await its `ready` event (or check its startup nodes) before verify()');
    }
    await Promise.all(nodes.map(verifyNode));
    // A read-only script on a key under the prefix: EVALSHA, and the ACL's key patterns, as every operation uses them.
    const probe = redisRecordKey(prefix, { scope: 'idemkit:verify', key: 'probe' });
    const found = await ask(client, 'evalsha', [READ.sha, 1, probe, graceMs], 'EVALSHA (the read script)');
    if (found !== null) throw new StoreUnavailableError(`redis store: the verify probe key ${probe} holds a record; it is never written, so another program writes under the prefix ${JSON.stringify(prefix)}`);
    if (!cluster) return;
    // Each script takes one key, the record's: the client routes it by its hash tag, and the server must agree.
    const answer = await ask(client, 'cluster', ['KEYSLOT', probe], 'CLUSTER KEYSLOT');
    const slot = typeof answer === 'number' ? answer : Number(text(answer));
    if (slot !== keySlot(probe)) {
      throw new StoreIncompatibleError(
        'key-slot',
        `redis store: the Cluster puts the record key ${probe} on slot ${slot}, not on slot ${keySlot(probe)} of its hash tag, where the client sends its scripts; the server or a proxy in front of it does not hash keys as Redis Cluster does (route the client to the Cluster's own nodes)`,
      );
    }
  }

  return {
    name: 'redis',
    maxResponseBytes,
    keyOf,
    verify,
    claim,
    // 0 ends the lease now (how ctx.suspend() gives it back): a claim of the same request takes over at once.
    async renew(ref, token, leaseMs) {
      checkRecordRef(ref);
      return (await run(RENEW, keyOf(ref), ref, [token, ms('leaseMs', leaseMs, 0)])) === 1;
    },
    async checkpoint(ref, token, point, data) {
      checkRecordRef(ref);
      const json = data === undefined ? undefined : JSON.stringify(data);
      await fenced(CHECKPOINT, ref, json === undefined ? [token, point, '0'] : [token, point, '1', json]);
    },
    complete,
    async release(ref, token) {
      checkRecordRef(ref);
      await fenced(RELEASE, ref, [token]);
    },
    get,
    reap,
    admin: redisAdmin({ client, pattern, keyOf, run }),
  };
}

/**
 * What a refused command of `verify()` means: an ACL that forbids the command or the store's keys,
 * a command renamed away, or (anything else) a server that failed to answer.
 */
function refusal(message: string, where: string, what: string, prefix: string, cause: unknown): StoreIncompatibleError | StoreUnavailableError {
  if (/^NOPERM\b/.test(message) && /\bkeys?\b/i.test(message)) {
    return new StoreIncompatibleError(
      'keys-refused',
      `redis store: Redis at ${where} refuses the store's keys to this connection's ACL user (${what}: ${message}); allow them: ACL SETUSER <user> ~${prefix}:*`,
      { cause },
    );
  }
  if (/^NOPERM\b/.test(message)) {
    return new StoreIncompatibleError(
      'scripting-refused',
      `redis store: Redis at ${where} refuses ${what} to this connection's ACL user (${message}); the store runs Lua scripts: ACL SETUSER <user> +@scripting (at least +script|load +evalsha +eval)`,
      { cause },
    );
  }
  if (/unknown (sub)?command/i.test(message)) {
    return new StoreIncompatibleError(
      'scripting-refused',
      `redis store: Redis at ${where} does not know ${what} (${message}); the store runs Lua scripts: remove the rename-command of EVAL, EVALSHA and SCRIPT from the server's configuration`,
      { cause },
    );
  }
  return new StoreUnavailableError(`redis store: ${what} failed at ${where}: ${message}`, { cause });
}

// The clients already warned about: one line per client, however many stores share it.
const warned = new WeakSet<object>();
// A command resent more often than this after reconnects may run long after its request was answered.
const MAX_QUIET_RETRIES = 1;

/** The ioredis options of a client (a Cluster's own, and the node options it passes on), if it has any. */
function clientOptions(client: object): { own: Record<string, unknown>; node: Record<string, unknown> } | undefined {
  const own = (client as { options?: unknown }).options;
  if (typeof own !== 'object' || own === null) return undefined;
  const cluster = typeof (client as { nodes?: unknown }).nodes === 'function';
  const node = cluster ? (own as { redisOptions?: unknown }).redisOptions : own;
  return { own: own as Record<string, unknown>, node: typeof node === 'object' && node !== null ? (node as Record<string, unknown>) : {} };
}

/** True when ioredis would hold a command in its offline queue while disconnected (its default). */
function queuesOffline(client: object): boolean {
  return clientOptions(client)?.own.enableOfflineQueue !== false;
}

/**
 * Warns once per client when its settings make an outage slow and late: with the offline queue
 * on, every request waits out `storeTimeoutMs` for its 503 and a queued claim runs after its
 * request was answered (its key then answers 409 for a lease); with `maxRetriesPerRequest` null
 * or above 1, a command is resent after each reconnect. A client without ioredis options (a
 * wrapper, a test double) is not judged.
 */
function warnAboutClient(client: object, logger: IdempotencyLogger): void {
  const options = clientOptions(client);
  if (options === undefined || warned.has(client)) return;
  const cluster = typeof (client as { nodes?: unknown }).nodes === 'function';
  const problems: string[] = [];
  if (options.own.enableOfflineQueue !== false) {
    problems.push('enableOfflineQueue is on (commands wait in a queue while Redis is down: each request waits out storeTimeoutMs for its 503, and a queued claim runs after its request was answered)');
  }
  // ioredis's default is 20; a Cluster passes its `redisOptions` to each node.
  const retries = options.node.maxRetriesPerRequest === undefined ? 20 : options.node.maxRetriesPerRequest;
  if (retries === null || (typeof retries === 'number' && retries > MAX_QUIET_RETRIES)) {
    const many = retries === null ? 'without limit' : `up to ${retries} times`;
    problems.push(`maxRetriesPerRequest is ${String(retries)} (a command whose connection dropped is resent ${many} after reconnecting, long after its request was answered)`);
  }
  if (problems.length === 0) return;
  warned.add(client);
  const recommended = cluster
    ? 'new Cluster(nodes, { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } })'
    : 'new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true }), then await client.connect()';
  try {
    logger.warn(`idemkit: redisStore(): the ioredis client's ${problems.join('; and ')}. Recommended: ${recommended} (docs/stores/redis.md, "Client settings").`);
  } catch {
    /* a logger that throws must not fail the store's construction */
  }
}

/** `host:port` of an ioredis node, for messages. */
function addressOf(node: object): string {
  const options = (node as { options?: { host?: unknown; port?: unknown; path?: unknown } }).options;
  if (typeof options?.path === 'string' && options.path !== '') return options.path;
  return typeof options?.host === 'string' && options.port !== undefined ? `${options.host}:${String(options.port)}` : 'the server';
}

/** The ioredis `keyPrefix` of a client (a `Redis`, or a `Cluster` through its node options), if any. */
function keyPrefixOf(client: object): string | undefined {
  const options = (client as { options?: { keyPrefix?: unknown; redisOptions?: { keyPrefix?: unknown } } }).options;
  const keyPrefix = options?.keyPrefix ?? options?.redisOptions?.keyPrefix;
  return typeof keyPrefix === 'string' && keyPrefix !== '' ? keyPrefix : undefined;
}

/** The Cluster slot of `key`, as Redis computes it: CRC16 (XMODEM) of its hash tag (or the whole key), mod 16384. */
export function keySlot(key: string): number {
  const open = key.indexOf('{');
  const close = open === -1 ? -1 : key.indexOf('}', open + 1);
  const hashed = close > open + 1 ? key.slice(open + 1, close) : key;
  let crc = 0;
  for (const byte of Buffer.from(hashed, 'utf8')) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

const WRONG_TYPE = 'the key does not hold a string (records are strings; a hash is from an earlier idemkit)';

/** A record that cannot be read names its Redis key and its (scope, key), so it can be found and fixed. */
function corrupt(redisKey: string, ref: RecordRef | undefined, reason: string): CorruptRecordError {
  const which = ref ? ` (scope ${JSON.stringify(ref.scope)}, key ${JSON.stringify(ref.key)})` : '';
  return new CorruptRecordError(
    `redis store: the record at Redis key "${redisKey}"${which} cannot be parsed: ${reason}. ` +
      'Inspect it with GET (docs/stores/redis.md shows how to decode it); deleting it makes the key new again.',
  );
}

function ms(name: string, value: number, min: 0 | 1): string {
  if (!Number.isSafeInteger(value) || value < min) throw new InvalidOptionError(name, `expected an integer >= ${min}, got ${String(value)}`);
  return String(value);
}

/** An unref'd timer: a completion still retrying must not keep a shutting-down process alive. */
function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)).unref());
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function text(value: unknown): string | undefined {
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return typeof value === 'string' ? value : undefined;
}

type Corrupt = (reason: string) => CorruptRecordError;

function parseInteger(value: unknown, field: string, at: Corrupt): number {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  const s = text(value);
  if (s === undefined || !/^\d{1,16}$/.test(s)) throw at(`${field} is not an integer`);
  return Number(s);
}

function parseJson(value: unknown, field: string, at: Corrupt): unknown {
  try {
    return JSON.parse(text(value) ?? '');
  } catch {
    throw at(`${field} is not JSON`);
  }
}

/** [status, headers, body, body_omitted] as the scripts reply them, or as the record holds them. */
function parseResponse([status, headers, body, omitted]: unknown[], at: Corrupt): StoredResponse {
  if (!isHttpStatus(status)) throw at('status is not an HTTP status code');
  const pairs = parseJson(headers, 'headers', at);
  const headersWrong = headersProblem(pairs);
  if (headersWrong !== undefined) throw at(headersWrong);
  if (omitted !== 0 && omitted !== 1) throw at('body_omitted is neither 0 nor 1');
  if (omitted === 0 && !Buffer.isBuffer(body)) throw at('body is missing');
  return {
    status,
    headers: pairs as Array<[string, string]>,
    // A copy: the reply buffer may be a view into a larger socket buffer.
    body: omitted === 1 ? null : new Uint8Array(body as Buffer),
    bodyOmitted: omitted === 1,
  };
}

/** A node-redis client has `sendCommand` where ioredis has `callBuffer`: say what to do with it. */
function notIoredis(value: object): string | undefined {
  const candidate = value as { callBuffer?: unknown; sendCommand?: unknown };
  if (typeof candidate.callBuffer !== 'function' && typeof candidate.sendCommand === 'function') {
    return 'this looks like a node-redis client: redisStore needs ioredis (new Redis() from "ioredis"); node-redis works with the Redis patterns (oneTimeTokens, redisLock from idemkit/patterns)';
  }
  return undefined;
}
