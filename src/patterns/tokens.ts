/**
 * One-time tokens (anti-resubmission): the server hands a token to the form; the submit consumes
 * it. Consuming is one atomic read-and-delete, so of any number of concurrent submits exactly one
 * gets the token's value.
 */
import { InvalidOptionError } from '../core/errors.js';
import { checkInteger, optionReader } from '../core/option-reader.js';
import { TOKEN_SHAPE, checkPrefix, checkRedis, randomToken, runScript, script } from './redis.js';
import type { RedisClientLike } from './redis.js';

export interface OneTimeTokensOptions {
  /** Key prefix of the tokens, e.g. `app:form-token:`. Required. */
  readonly prefix: string;
  /**
   * How to read-and-delete: `getdel` (Redis ≥ 6.2), `script` (GET and DEL in one Lua script, any
   * version), or `auto`: GETDEL, switching to the script for good when the server does not know it.
   * @default 'auto'
   */
  readonly consumeWith?: 'auto' | 'getdel' | 'script';
}

export interface OneTimeTokens {
  /** Stores a new random 128-bit token for `ttlMs` with `value` (default `'1'`) and answers it. */
  issue(ttlMs: number, value?: string): Promise<string>;
  /** Answers the token's value and deletes it, atomically; undefined if unknown, expired or already used. */
  consume(token: string): Promise<string | undefined>;
}

// GET and DEL in one script run: nothing can run between them, as with GETDEL.
const GET_DEL = script(`local v = redis.call('GET', KEYS[1])
if v then redis.call('DEL', KEYS[1]) end
return v`);

export function oneTimeTokens(redis: RedisClientLike, options: OneTimeTokensOptions): OneTimeTokens {
  const client = checkRedis(redis);
  const prefix = checkPrefix(options?.prefix);
  const read = optionReader('oneTimeTokens()', options);
  read.accept('prefix');
  const mode = read.oneOf('consumeWith', ['auto', 'getdel', 'script'], { default: 'auto' });
  read.done();
  // Decided once: after the server refuses GETDEL, every consume uses the script.
  let useScript = mode === 'script';

  return {
    async issue(ttlMs, value = '1') {
      const ttl = checkInteger('ttlMs', ttlMs, { required: true, min: 1 });
      if (typeof value !== 'string') throw new InvalidOptionError('value', `expected a string, got ${typeof value}`);
      for (;;) {
        const token = randomToken();
        // NX: a (practically impossible) collision must not overwrite a live token.
        if ((await client.call('SET', prefix + token, value, 'PX', ttl, 'NX')) === 'OK') return token;
      }
    },
    async consume(token) {
      if (typeof token !== 'string') throw new InvalidOptionError('token', `expected a string, got ${typeof token}`);
      // A token we never issued (wrong shape) is simply not valid: no round trip for it.
      if (!TOKEN_SHAPE.test(token)) return undefined;
      const key = prefix + token;
      if (!useScript) {
        try {
          return asValue(await client.call('GETDEL', key));
        } catch (error) {
          if (mode === 'getdel' || !isUnknownCommand(error)) throw error;
          useScript = true;
        }
      }
      return asValue(await runScript(client, GET_DEL, [key], []));
    },
  };
}

function asValue(reply: unknown): string | undefined {
  if (reply === null || reply === undefined) return undefined;
  return Buffer.isBuffer(reply) ? reply.toString('utf8') : String(reply);
}

function isUnknownCommand(error: unknown): boolean {
  return /unknown command/i.test(String((error as Error)?.message));
}
