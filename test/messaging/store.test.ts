import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { consumeOnce } from '../../src/messaging/index.js';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis.js';
import { REDIS, requireService } from '../support/services.js';

const hasRedis = await requireService(REDIS);
const prefix = `idem-msg-${process.pid}-${randomBytes(3).toString('hex')}`;

function suite(label: string, available: boolean, make: () => { store: IdempotencyStore; close(): Promise<void> }) {
  describe.skipIf(!available)(`consumeOnce with a store (${label})`, () => {
    const { store, close } = available ? make() : { store: undefined as never, close: async () => {} };
    afterAll(() => close());

    it('processes once, then reports duplicates; a throwing handler releases the claim', async () => {
      let runs = 0;
      await expect(consumeOnce({ store, consumer: 'c', messageId: 'a' }, async () => { runs++; throw new Error('boom'); })).rejects.toThrow('boom');
      expect(await consumeOnce({ store, consumer: 'c', messageId: 'a' }, async () => ++runs)).toEqual({ status: 'processed', value: 2 });
      expect(await consumeOnce({ store, consumer: 'c', messageId: 'a' }, async () => ++runs)).toEqual({ status: 'duplicate' });
      expect(runs).toBe(2);
    });

    it('lets one of many concurrent deliveries run; the others see it in flight', async () => {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let runs = 0;
      const first = consumeOnce({ store, consumer: 'c', messageId: 'b', leaseMs: 30_000 }, async () => {
        runs++;
        await gate;
      });
      // The first claim is made before the handler runs; wait for the handler, not for time.
      while (runs === 0) await new Promise((resolve) => setImmediate(resolve));
      const others = await Promise.all(Array.from({ length: 10 }, () => consumeOnce({ store, consumer: 'c', messageId: 'b' }, async () => runs++)));
      expect(others.every((r) => r.status === 'in_flight')).toBe(true);
      release();
      expect((await first).status).toBe('processed');
      expect((await consumeOnce({ store, consumer: 'c', messageId: 'b' }, async () => runs++)).status).toBe('duplicate');
      expect(runs).toBe(1);
    });
  });
}

suite('memory', true, () => ({ store: memoryStore(), close: async () => {} }));
suite('Redis', hasRedis, () => {
  const client = new Redis({ host: REDIS.host, port: REDIS.port, lazyConnect: false });
  return {
    store: redisStore({ client, prefix }),
    close: async () => {
      const keys = await client.keys(`${prefix}:*`);
      if (keys.length) await client.del(...keys);
      await client.quit();
    },
  };
});
