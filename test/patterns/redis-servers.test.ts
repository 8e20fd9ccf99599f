/**
 * The Redis guards on throwaway servers (started here, stopped by pid): one without GETDEL (like
 * Redis < 6.2, by renaming the command away), and a 3-master Cluster.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisLock } from '../../src/patterns/lock.js';
import { oneTimeTokens } from '../../src/patterns/tokens.js';
import type { RedisClusterHandle, RedisServer } from '../support/redis-servers.js';
import { requireRedisBinaries, startRedisCluster, startRedisServer } from '../support/redis-servers.js';

const binaries = requireRedisBinaries();

describe.skipIf(!binaries)('one-time tokens on a server without GETDEL', () => {
  let server: RedisServer;
  let dir: string;
  let clients: Redis[] = [];
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'idemkit-redis-old-'));
    server = await startRedisServer({ dir, args: ['--rename-command', 'GETDEL', ''] });
    clients = Array.from({ length: 4 }, () => new Redis({ host: '127.0.0.1', port: server.port, maxRetriesPerRequest: 1 }));
  });
  afterAll(async () => {
    for (const c of clients) c.disconnect();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the server really refuses GETDEL', async () => {
    await expect(clients[0]!.call('GETDEL', 'x')).rejects.toThrow(/unknown command/i);
  });

  it('auto detects it and falls back to the script: 200 concurrent consumers, one winner, each round', async () => {
    const perClient = clients.map((c) => oneTimeTokens(c, { prefix: 'old:' }));
    for (let round = 0; round < 5; round++) {
      const token = await perClient[0]!.issue(60_000, `v${round}`);
      const got = await Promise.all(Array.from({ length: 200 }, (_, i) => perClient[i % perClient.length]!.consume(token)));
      expect(got.filter((v) => v !== undefined)).toEqual([`v${round}`]);
    }
  });

  it('forced getdel reports the refusal instead of hiding it', async () => {
    const tokens = oneTimeTokens(clients[0]!, { prefix: 'old:', consumeWith: 'getdel' });
    await expect(tokens.consume(await tokens.issue(60_000))).rejects.toThrow(/unknown command/i);
  });
});

describe.skipIf(!binaries)('Redis guards on a 3-master Cluster', () => {
  let cluster: RedisClusterHandle;
  let client: Cluster;
  beforeAll(async () => {
    cluster = await startRedisCluster(3);
    client = new Cluster([...cluster.nodes], { redisOptions: { maxRetriesPerRequest: 1 } });
    client.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      client.once('ready', resolve);
      client.once('end', () => reject(new Error('the cluster client gave up connecting')));
    });
  }, 60_000);
  afterAll(async () => {
    client?.disconnect();
    await cluster?.stop();
  });

  it('tokens on keys spread over every slot: issue and consume once, both ways', async () => {
    for (const consumeWith of ['getdel', 'script'] as const) {
      const tokens = oneTimeTokens(client, { prefix: `c:${consumeWith}:`, consumeWith });
      const issued = await Promise.all(Array.from({ length: 60 }, (_, i) => tokens.issue(60_000, String(i))));
      const first = await Promise.all(issued.map((t) => tokens.consume(t)));
      expect(first).toEqual(issued.map((_, i) => String(i)));
      expect((await Promise.all(issued.map((t) => tokens.consume(t)))).every((v) => v === undefined)).toBe(true);
    }
  });

  it('locks on many names: the lock and its fence share a slot, so the scripts run', async () => {
    const locks = redisLock(client, { prefix: 'c:lock:' });
    const names = Array.from({ length: 30 }, (_, i) => `job-${i}`);
    const leases = await Promise.all(names.map((n) => locks.acquire(n, 60_000)));
    expect(leases.every((l) => l !== undefined && l.fence === 1)).toBe(true);
    expect((await Promise.all(names.map((n) => locks.acquire(n, 60_000)))).every((l) => l === undefined)).toBe(true);
    expect((await Promise.all(leases.map((l) => l!.extend(90_000)))).every(Boolean)).toBe(true);
    expect((await Promise.all(leases.map((l) => l!.release()))).every(Boolean)).toBe(true);
    const again = await Promise.all(names.map((n) => locks.acquire(n, 60_000)));
    expect(again.every((l) => l?.fence === 2)).toBe(true);
  });
});
