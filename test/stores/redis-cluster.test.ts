/**
 * The store on a real Redis Cluster: three masters started from the machine's redis-server,
 * joined by `redis-cli --cluster create`, and stopped by pid afterwards.
 */
import { randomUUID } from 'node:crypto';
import { Cluster } from 'ioredis';
import type { RedisStoreOptions } from '../../src/stores/redis/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StoredResponse } from '../../src/core/store.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { keySlot } from '../../src/stores/redis/keys.js';
import { CHECKPOINT, CLAIM, COMPLETE, READ, REAP, RELEASE, RENEW } from '../../src/stores/redis/lua.js';
import type { RedisClusterHandle } from '../support/redis-servers.js';
import type { StoreClientLibrary } from '../support/redis-servers.js';
import { STORE_CLIENT_LIBRARIES, connectIoredisCluster, connectNodeRedisCluster, deleteKeys, requireRedisBinaries, sleep, startRedisCluster } from '../support/redis-servers.js';
import { describeStoreContract } from './contract.js';

const binaries = requireRedisBinaries();
const ok: StoredResponse = { status: 200, headers: [], body: new TextEncoder().encode('ok'), bodyOmitted: false };
const opts = { leaseMs: 5_000, windowMs: 60_000 };

/** A Cluster client of `library` with the recommended settings (docs/stores/redis.md), and how to let it go. */
async function connectCluster(library: StoreClientLibrary, cluster: RedisClusterHandle): Promise<{ client: RedisStoreOptions['client']; close(): void }> {
  if (library === 'ioredis') {
    const client = await connectIoredisCluster(cluster.nodes);
    return { client, close: () => client.disconnect() };
  }
  const client = await connectNodeRedisCluster(cluster.nodes);
  return { client, close: () => client.destroy() };
}

describe.skipIf(!binaries)('redis store on a 3-master Redis Cluster', () => {
  // Started once, by whichever hook needs it first; stopped after every suite in this file.
  let started: Promise<RedisClusterHandle> | undefined;
  const cluster = () => (started ??= startRedisCluster(3));
  afterAll(async () => {
    await (await started?.catch(() => undefined))?.stop();
  });

  for (const library of STORE_CLIENT_LIBRARIES) {
    describeStoreContract(`redis cluster through ${library}`, async () => {
      const { client, close } = await connectCluster(library, await cluster());
      return { store: redisStore({ client, prefix: `contract-${library}` }), advance: sleep, close };
    });

    // The store's client is `library`'s; `client` (ioredis) looks at the masters from outside.
    describe(`routing through ${library}`, () => {
      let client: Cluster;
      let own: { client: RedisStoreOptions['client']; close(): void };
      beforeAll(async () => {
        client = await connectIoredisCluster((await cluster()).nodes);
        own = await connectCluster(library, await cluster());
      });
      afterAll(() => {
        client?.disconnect();
        own?.close();
      });

      it('spreads records over every master, each a one-key script on its own slot', async () => {
        const store = redisStore({ client: own.client, prefix: `spread-${library}` });
        for (let i = 0; i < 60; i++) {
          const claim = await store.claim({ scope: 't', key: `k-${i}` }, 'fp', opts);
          expect(claim.kind).toBe('acquired');
        }
        const masters = client.nodes('master');
        expect(masters).toHaveLength(3);
        // Deleting them counts them, per master.
        const counts = await Promise.all(masters.map((node) => deleteKeys(node, `spread-${library}:*`)));
        for (const n of counts) expect(n).toBeGreaterThan(0);
        expect(counts.reduce((a, b) => a + b, 0)).toBe(60);
      });

      it('keeps braces in scopes and keys out of the hash tag', async () => {
        const store = redisStore({ client: own.client, prefix: `braces-${library}` });
        const refs = [
          { scope: '{a}', key: 'k' },
          { scope: 'a', key: '}{' },
          { scope: '{', key: '{}' },
        ];
        for (const ref of refs) {
          const claim = await store.claim(ref, 'fp', opts);
          if (claim.kind !== 'acquired') throw new Error(claim.kind);
          await store.complete(ref, claim.token, ok);
        }
        for (const ref of refs) expect((await store.claim(ref, 'fp', opts)).kind).toBe('completed');
        expect(new Set(refs.map((r) => store.keyOf(r))).size).toBe(3);
      });

      it('survives SCRIPT FLUSH on every master', async () => {
        const store = redisStore({ client: own.client, prefix: `flush-${library}` });
        const ref = { scope: 't', key: randomUUID() };
        const claim = await store.claim(ref, 'fp', opts);
        if (claim.kind !== 'acquired') throw new Error(claim.kind);
        await Promise.all(client.nodes('master').map((node) => node.script('FLUSH')));
        await store.complete(ref, claim.token, ok);
        await Promise.all(client.nodes('master').map((node) => node.script('FLUSH')));
        const replay = await store.claim(ref, 'fp', opts);
        expect(replay.kind === 'completed' && new TextDecoder().decode(replay.response.body!)).toBe('ok');
      });

      it('verify() loads every script on every master, and the server slots record keys by their hash tag', async () => {
        await Promise.all(client.nodes('master').map((node) => node.script('FLUSH')));
        const store = redisStore({ client: own.client, prefix: `verify-${library}` });
        await expect(store.verify()).resolves.toBeUndefined();
        for (const node of client.nodes('master')) {
          expect(await node.script('EXISTS', ...[CLAIM, RENEW, CHECKPOINT, COMPLETE, RELEASE, READ, REAP].map((s) => s.sha))).toEqual([1, 1, 1, 1, 1, 1, 1]);
        }
        for (let i = 0; i < 20; i++) {
          const key = store.keyOf({ scope: 't', key: `k-${i}` });
          expect(await client.cluster('KEYSLOT', key)).toBe(keySlot(key));
        }
      });

      it.runIf(library === 'ioredis')('verify() with a keyPrefix on the Cluster client: StoreIncompatibleError', async () => {
        const prefixed = new Cluster([...(await cluster()).nodes], { enableOfflineQueue: false, keyPrefix: 'app{x}:', redisOptions: { maxRetriesPerRequest: 0 } });
        prefixed.on('error', () => {});
        try {
          await expect(redisStore({ client: prefixed, prefix: 'verify' }).verify()).rejects.toMatchObject({ code: 'ERR_IDEMKIT_STORE_INCOMPATIBLE', reason: 'key-prefix' });
        } finally {
          prefixed.disconnect();
        }
      });
    });
  }
});
