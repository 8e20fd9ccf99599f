import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import { redisLock } from '../../src/patterns/lock.js';
import type { RedisCaller } from '../../src/patterns/redis.js';
import { oneTimeTokens } from '../../src/patterns/tokens.js';
import { REDIS, requireService } from '../support/services.js';

const available = await requireService(REDIS);
const PREFIX = `idemkit:test:patterns:${process.pid}:${randomBytes(4).toString('hex')}:`;

describe.skipIf(!available)('Redis guards', () => {
  // Several connections, so racing commands arrive on separate sockets as they would from separate servers.
  let clients: Redis[] = [];
  const client = (i = 0) => clients[i % clients.length]!;

  beforeAll(() => {
    clients = Array.from({ length: 4 }, () => new Redis({ host: REDIS.host, port: REDIS.port, lazyConnect: false, maxRetriesPerRequest: 1 }));
  });
  afterAll(async () => {
    const c = client();
    let cursor = '0';
    do {
      const [next, keys] = await c.scan(cursor, 'MATCH', `${PREFIX}*`, 'COUNT', 500);
      if (keys.length > 0) await c.del(...keys);
      cursor = next;
    } while (cursor !== '0');
    await Promise.all(clients.map((c) => c.quit()));
  });

  /** A client on which GETDEL does not exist, like Redis < 6.2; everything else goes to the server. */
  const withoutGetdel = (inner: Redis) => {
    const sent: string[] = [];
    const wrapped: RedisCaller = {
      call: async (command, ...args) => {
        sent.push(command.toUpperCase());
        if (command.toUpperCase() === 'GETDEL') throw new Error("ERR unknown command 'GETDEL', with args beginning with: ");
        return inner.call(command, ...args);
      },
    };
    return { wrapped, sent };
  };

  describe('oneTimeTokens', () => {
    for (const consumeWith of ['getdel', 'script', 'auto'] as const) {
      it(`issues a 128-bit token and consumes it once (${consumeWith})`, async () => {
        const tokens = oneTimeTokens(client(), { prefix: `${PREFIX}tok:${consumeWith}:`, consumeWith });
        const token = await tokens.issue(60_000, 'order-form:42');
        expect(token).toMatch(/^[A-Za-z0-9_-]{22}$/);
        expect(Buffer.from(token, 'base64url')).toHaveLength(16);
        expect(await tokens.consume(token)).toBe('order-form:42');
        expect(await tokens.consume(token)).toBeUndefined();
        expect(await tokens.consume('not-a-token')).toBeUndefined();
        expect(await tokens.consume(await tokens.issue(60_000))).toBe('1');
      });

      it(`200 concurrent consumers of one token: exactly one gets it (${consumeWith})`, async () => {
        const tokens = oneTimeTokens(client(), { prefix: `${PREFIX}race:${consumeWith}:`, consumeWith });
        for (let round = 0; round < 5; round++) {
          const token = await tokens.issue(60_000, `v${round}`);
          // One tokens object per connection, so the consumes really race on the server.
          const perClient = clients.map((c) => oneTimeTokens(c, { prefix: `${PREFIX}race:${consumeWith}:`, consumeWith }));
          const got = await Promise.all(Array.from({ length: 200 }, (_, i) => perClient[i % perClient.length]!.consume(token)));
          expect(got.filter((v) => v !== undefined)).toEqual([`v${round}`]);
        }
      });
    }

    it('without GETDEL on the server, auto switches to the script once and still gives one winner of 200', async () => {
      const { wrapped, sent } = withoutGetdel(client());
      const tokens = oneTimeTokens(wrapped, { prefix: `${PREFIX}old:` });
      const token = await tokens.issue(60_000, 'x');
      const got = await Promise.all(Array.from({ length: 200 }, () => tokens.consume(token)));
      expect(got.filter((v) => v !== undefined)).toEqual(['x']);
      // Concurrent first calls may each try GETDEL before the first refusal arrives; later ones never do.
      const before = sent.filter((c) => c === 'GETDEL').length;
      await tokens.consume(await tokens.issue(60_000));
      expect(sent.filter((c) => c === 'GETDEL').length).toBe(before);
      // With getdel forced, the refusal is reported rather than hidden.
      const strict = oneTimeTokens(wrapped, { prefix: `${PREFIX}old:`, consumeWith: 'getdel' });
      await expect(strict.consume(await strict.issue(60_000))).rejects.toThrow(/unknown command/);
    });

    it('a token expires after its TTL', async () => {
      const tokens = oneTimeTokens(client(), { prefix: `${PREFIX}ttl:` });
      const token = await tokens.issue(1);
      // Wait for the server to have expired it (a state, polled), then consume.
      while ((await client().exists(`${PREFIX}ttl:${token}`)) === 1) await new Promise((r) => setImmediate(r));
      expect(await tokens.consume(token)).toBeUndefined();
    });

    it('refuses bad options and inputs, naming them', async () => {
      expect(() => oneTimeTokens({} as never, { prefix: 'p:' })).toThrow(/`redis`/);
      expect(() => oneTimeTokens(client(), { prefix: '' })).toThrow(/`prefix`/);
      expect(() => oneTimeTokens(client(), { prefix: 'p:', consumeWith: 'lua' as never })).toThrow(/`consumeWith`/);
      expect(() => oneTimeTokens(client(), { prefix: 'p:', ttlMs: 5 } as never)).toThrow(/`ttlMs`/);
      const tokens = oneTimeTokens(client(), { prefix: `${PREFIX}bad:` });
      await expect(tokens.issue(0)).rejects.toThrow(InvalidOptionError);
      await expect(tokens.issue(1.5)).rejects.toThrow(/`ttlMs`/);
      await expect(tokens.issue(1000, 5 as never)).rejects.toThrow(/`value`/);
      await expect(tokens.consume(undefined as never)).rejects.toThrow(/`token`/);
    });
  });

  describe('redisLock', () => {
    it('many callers contending: at most one holder at a time, and fences increase in holding order', async () => {
      const locks = clients.map((c) => redisLock(c, { prefix: `${PREFIX}lock:` }));
      let holders = 0;
      let maxHolders = 0;
      const fences: number[] = [];
      const callers = 50;
      await Promise.all(
        Array.from({ length: callers }, async (_, i) => {
          const lock = locks[i % locks.length]!;
          for (;;) {
            const lease = await lock.acquire('contended', 30_000);
            if (!lease) continue;
            holders++;
            maxHolders = Math.max(maxHolders, holders);
            fences.push(lease.fence);
            // Hold it across real round trips, so others' attempts land while it is held.
            await client(i + 1).ping();
            await client(i + 2).ping();
            holders--;
            expect(await lease.release()).toBe(true);
            return;
          }
        }),
      );
      expect(maxHolders).toBe(1);
      expect(fences).toHaveLength(callers);
      for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1]!);
    });

    it('an expired lock taken by B: A cannot release or extend it, and B has the higher fence', async () => {
      const lock = redisLock(client(), { prefix: `${PREFIX}lock:` });
      const key = `${PREFIX}lock:{job-7}`;
      const a = await lock.acquire('job-7', 1);
      expect(a).toBeDefined();
      // Until the server has expired A's key (a state, polled).
      while ((await client().exists(key)) === 1) await new Promise((r) => setImmediate(r));
      const b = await lock.acquire('job-7', 60_000);
      expect(b).toBeDefined();
      expect(b!.fence).toBeGreaterThan(a!.fence);
      expect(await a!.release()).toBe(false);
      expect(await a!.extend(120_000)).toBe(false);
      expect(await client().get(key)).toBe(b!.owner);
      expect(await client().pttl(key)).toBeLessThanOrEqual(60_000);
      expect(await b!.extend(120_000)).toBe(true);
      expect(await client().pttl(key)).toBeGreaterThan(60_000);
      expect(await b!.release()).toBe(true);
      expect(await client().exists(key)).toBe(0);
      expect(await b!.release()).toBe(false);
    });

    it('a held lock is refused to others; a key holding another owner is neither released nor extended', async () => {
      const lock = redisLock(client(), { prefix: `${PREFIX}lock:` });
      const a = await lock.acquire('held', 60_000);
      expect(await lock.acquire('held', 60_000)).toBeUndefined();
      // Someone else's value in the key (as after an expiry and a re-acquire elsewhere).
      await client().set(`${PREFIX}lock:{held}`, 'someone-else', 'PX', 60_000);
      expect(await a!.release()).toBe(false);
      expect(await a!.extend(1)).toBe(false);
      expect(await client().get(`${PREFIX}lock:{held}`)).toBe('someone-else');
      expect(await client().pttl(`${PREFIX}lock:{held}`)).toBeGreaterThan(1000);
    });

    it('refuses bad options, naming them', async () => {
      expect(() => redisLock(null as never, { prefix: 'p:' })).toThrow(/`redis`/);
      expect(() => redisLock(client(), {} as never)).toThrow(/`prefix`/);
      expect(() => redisLock(client(), { prefix: 'p:', ttl: 5 } as never)).toThrow(/`ttl`/);
      const lock = redisLock(client(), { prefix: `${PREFIX}lock:` });
      await expect(lock.acquire('', 1000)).rejects.toThrow(/`name`/);
      await expect(lock.acquire('x', 0)).rejects.toThrow(/`ttlMs`/);
      const lease = await lock.acquire('opts', 60_000);
      await expect(lease!.extend(-1)).rejects.toThrow(/`ttlMs`/);
    });
  });
});

describe.skipIf(!available)('Redis guards on a node-redis client', () => {
  it('tokens and locks work through sendCommand', async () => {
    const { createClient } = await import('@redis/client');
    const client = createClient({ socket: { host: REDIS.host, port: REDIS.port } });
    await client.connect();
    const prefix = `${PREFIX}node-redis:`;
    try {
      for (const consumeWith of ['getdel', 'script'] as const) {
        const tokens = oneTimeTokens(client, { prefix, consumeWith });
        const token = await tokens.issue(60_000, 'v');
        const got = await Promise.all(Array.from({ length: 50 }, () => tokens.consume(token)));
        expect(got.filter((v) => v !== undefined)).toEqual(['v']);
      }
      const lock = redisLock(client, { prefix });
      const a = await lock.acquire('n', 60_000);
      expect(a?.fence).toBe(1);
      expect(await lock.acquire('n', 60_000)).toBeUndefined();
      expect(await a!.extend(90_000)).toBe(true);
      expect(await a!.release()).toBe(true);
      expect((await lock.acquire('n', 60_000))?.fence).toBe(2);
    } finally {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(keys);
      await client.quit();
    }
  });
});
