/**
 * What the Redis guards need from a client: one generic command call. An ioredis `Redis` or
 * `Cluster` fits (`call`); a node-redis (`@redis/client`, `redis`) client fits through
 * `sendCommand`; so does anything that forwards a command and its arguments.
 */
import { createHash, randomBytes } from 'node:crypto';
import { InvalidOptionError } from '../core/errors.js';

export interface RedisCaller {
  call(command: string, ...args: Array<string | number>): Promise<unknown>;
}

/** A node-redis client (`createClient()` of `redis` / `@redis/client`, standalone). */
export interface RedisCommandSender {
  sendCommand(args: string[]): Promise<unknown>;
}

export type RedisClientLike = RedisCaller | RedisCommandSender;

export interface Script {
  readonly source: string;
  readonly sha: string;
}

export function script(source: string): Script {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}

/** EVALSHA, falling back to EVAL (which also caches the script) when the server does not have it. */
export async function runScript(redis: RedisCaller, s: Script, keys: readonly string[], args: ReadonlyArray<string | number>): Promise<unknown> {
  try {
    return await redis.call('EVALSHA', s.sha, keys.length, ...keys, ...args);
  } catch (error) {
    if (!/NOSCRIPT/i.test(String((error as Error)?.message))) throw error;
    return redis.call('EVAL', s.source, keys.length, ...keys, ...args);
  }
}

export function checkRedis(redis: unknown): RedisCaller {
  if (typeof redis === 'object' && redis !== null) {
    if (typeof (redis as RedisCaller).call === 'function') return redis as RedisCaller;
    const sender = redis as RedisCommandSender;
    if (typeof sender.sendCommand === 'function') {
      // node-redis takes the command as one array of strings.
      return { call: (command, ...args) => sender.sendCommand([command, ...args.map(String)]) };
    }
  }
  throw new InvalidOptionError('redis', 'expected an ioredis Redis or Cluster, or a node-redis client (call or sendCommand)');
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
