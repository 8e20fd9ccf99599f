/**
 * What the Redis guards need from a client: one generic command call. An ioredis `Redis` or
 * `Cluster` fits (`call`); a node-redis (`@redis/client`, `redis`) client fits through
 * `sendCommand`; so does anything that forwards a command and its arguments. The client shapes
 * and the script call live in drivers/redis.ts, shared with the Redis store.
 */
import { randomBytes } from 'node:crypto';
import { InvalidOptionError } from '../core/errors.js';
import type { RedisCaller, Script } from '../drivers/redis.js';
import { evalScript, redisCaller } from '../drivers/redis.js';

export type { RedisCaller, RedisClientLike, RedisCommandSender, Script } from '../drivers/redis.js';
export { script } from '../drivers/redis.js';

/** EVALSHA, falling back to EVAL (which also caches the script) when the server does not have it. */
export function runScript(redis: RedisCaller, s: Script, keys: readonly string[], args: ReadonlyArray<string | number>): Promise<unknown> {
  return evalScript(s, (command, shaOrSource) => redis.call(command.toUpperCase(), shaOrSource, keys.length, ...keys, ...args));
}

export function checkRedis(redis: unknown): RedisCaller {
  return redisCaller(redis);
}

export function checkPrefix(prefix: unknown): string {
  if (typeof prefix !== 'string' || prefix.length === 0) throw new InvalidOptionError('prefix', 'expected a non-empty key prefix, e.g. "app:token:"');
  return prefix;
}

/** 128 random bits, URL-safe: unguessable, so a token or owner value cannot be forged. */
export function randomToken(): string {
  return randomBytes(16).toString('base64url');
}

export const TOKEN_SHAPE = /^[A-Za-z0-9_-]{22}$/;
