/**
 * A Redis lease lock with a fencing token. The lock only keeps two holders out of the critical
 * section at the same time; it does not remember that the work was done. Pair it with a state
 * check (transition, insertOnce): see docs/patterns.md, "A lock is not idempotency".
 */
import { InvalidOptionError } from '../core/errors.js';
import { checkInteger, optionReader } from '../core/option-reader.js';
import { checkPrefix, checkRedis, randomToken, runScript, script } from './redis.js';
import type { RedisClientLike } from './redis.js';

export interface RedisLockOptions {
  /** Key prefix of the locks, e.g. `app:lock:`. Required. */
  readonly prefix: string;
}

export interface Lease {
  readonly name: string;
  /** The random value stored in the lock key: only this lease can extend or release it. */
  readonly owner: string;
  /**
   * Strictly increasing per lock name across all acquisitions. Pass it to the protected resource
   * and have it refuse a write with a fence lower than one it has seen: a holder that stalled past
   * its TTL then cannot overwrite its successor's work.
   */
  readonly fence: number;
  /** Sets the remaining time to `ttlMs` if the lock is still ours; false if it was lost. */
  extend(ttlMs: number): Promise<boolean>;
  /** Deletes the lock if it is still ours; false if it had expired (and maybe been taken). */
  release(): Promise<boolean>;
}

export interface RedisLock {
  /** Takes the lock for `ttlMs` if nobody holds it; undefined when it is held. Never waits. */
  acquire(name: string, ttlMs: number): Promise<Lease | undefined>;
}

// SET NX PX and the fence INCR in one script: a lease always comes with its fence, and no
// acquisition can be seen without one. The fence counter never expires (it must never go back).
const ACQUIRE = script(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false`);
const RELEASE = script(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`);
const EXTEND = script(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`);

export function redisLock(redis: RedisClientLike, options: RedisLockOptions): RedisLock {
  const client = checkRedis(redis);
  const prefix = checkPrefix(options?.prefix);
  const read = optionReader('redisLock()', options);
  read.accept('prefix');
  read.done();
  const keys = (name: string) => {
    // The braces make the lock and its fence one hash slot, so the script also runs on a Cluster.
    const base = `${prefix}{${name}}`;
    return [base, `${base}:fence`];
  };
  return {
    async acquire(name, ttlMs) {
      if (typeof name !== 'string' || name.length === 0) throw new InvalidOptionError('name', 'expected a non-empty lock name');
      const ttl = checkInteger('ttlMs', ttlMs, { required: true, min: 1 });
      const [key, fenceKey] = keys(name) as [string, string];
      const owner = randomToken();
      const fence = await runScript(client, ACQUIRE, [key, fenceKey], [owner, ttl]);
      if (fence === null || fence === undefined) return undefined;
      return {
        name,
        owner,
        fence: Number(fence),
        async extend(ms) {
          const next = checkInteger('ttlMs', ms, { required: true, min: 1 });
          return Number(await runScript(client, EXTEND, [key], [owner, next])) === 1;
        },
        async release() {
          return Number(await runScript(client, RELEASE, [key], [owner])) === 1;
        },
      };
    },
  };
}
