/**
 * What every operation of the Redis store shares, resolved once by `redisStore()`, and the one way
 * it runs a script on a record.
 */
import { LeaseLostError, StoreUnavailableError } from '../../core/errors.js';
import type { RecordRef } from '../../core/store.js';
import type { RedisArgument } from '../../drivers/redis.js';
import { isNoScript } from '../../drivers/redis.js';
import type { StoreClient } from './client.js';
import type { LuaScript } from './lua.js';
import { CORRUPT_CODE } from './lua.js';
import { WRONG_TYPE, corrupt, messageOf } from './reply.js';

export interface RedisContext {
  /** ioredis or node-redis, resolved once (client.ts). */
  readonly client: StoreClient;
  readonly prefix: string;
  readonly maxResponseBytes: number;
  /** `graceMs`, and as the scripts take it. */
  readonly grace: number;
  readonly graceMs: string;
  readonly completeRetryMs: number;
  readonly verifyTimeoutMs: number;
  /** Corks the client's socket until the end of the turn (`coalesceWrites`). */
  readonly coalesce: (() => void) | undefined;
  readonly keyOf: (ref: RecordRef) => string;
  /** Off when the server refuses SET with both NX and GET (before Redis 7.0): every claim is a script. */
  setNxGet: boolean;
}

/**
 * Runs one script on one record: EVALSHA, or EVAL when the server has lost its script cache (the
 * script did not run then, so sending it again is safe, and EVAL caches it again).
 */
export async function runScript(c: RedisContext, script: LuaScript, key: string, ref: RecordRef | undefined, args: RedisArgument[]): Promise<unknown> {
  try {
    c.coalesce?.();
    try {
      return await c.client.send('evalsha', key, [script.sha, 1, key, c.graceMs, ...args]);
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return await c.client.send('eval', key, [script.source, 1, key, c.graceMs, ...args]);
    }
  } catch (error) {
    const message = messageOf(error);
    if (message.startsWith(CORRUPT_CODE)) throw corrupt(key, ref, message.slice(CORRUPT_CODE.length).trim());
    if (message.startsWith('WRONGTYPE')) throw corrupt(key, ref, WRONG_TYPE);
    throw new StoreUnavailableError(`redis store: ${script.name} failed: ${message}`, { cause: error });
  }
}

/** A script fenced by the owner's token: any reply but 1 means the lease was lost. */
export async function fencedScript(c: RedisContext, script: LuaScript, ref: RecordRef, args: RedisArgument[]): Promise<void> {
  if ((await runScript(c, script, c.keyOf(ref), ref, args)) !== 1) throw new LeaseLostError();
}
