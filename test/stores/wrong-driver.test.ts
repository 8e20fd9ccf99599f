/**
 * A store factory given the wrong driver object (through `as any`, or plain JavaScript) refuses it
 * at once, naming the option and what it expected, instead of failing on every request later.
 * The real driver objects are built without connecting.
 */
import { Redis } from 'ioredis';
import mysql from 'mysql2';
import mysqlPromise from 'mysql2/promise';
import pg from 'pg';
import { createClient, createCluster, createSentinel } from 'redis';
import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { redisStore } from '../../src/stores/redis/index.js';

function refusal(fn: () => unknown): InvalidOptionError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidOptionError);
    return error as InvalidOptionError;
  }
  throw new Error('expected InvalidOptionError');
}

describe('store factories recognise a wrong driver object', () => {
  it('postgresStore: a pg.Client where a Pool belongs', async () => {
    const client = new pg.Client({ host: '127.0.0.1' });
    const pool = new pg.Pool({ host: '127.0.0.1' });
    try {
      const error = refusal(() => postgresStore({ pool: client as never }));
      expect(error.option).toBe('pool');
      expect(error.message).toMatch(/expected a node-postgres Pool/);
      expect(error.message).toMatch(/pg\.Client/);
      expect(() => postgresStore({ pool })).not.toThrow();
    } finally {
      await pool.end();
      await client.end().catch(() => {});
    }
  });

  it('mysqlStore: a single Connection, or the callback API, where a mysql2/promise Pool belongs', async () => {
    const connection = mysql.createConnection({ host: '127.0.0.1', port: 1 });
    connection.on('error', () => {});
    const callbackPool = mysql.createPool({ host: '127.0.0.1' });
    const pool = mysqlPromise.createPool({ host: '127.0.0.1' });
    try {
      const single = refusal(() => mysqlStore({ pool: connection as never }));
      expect(single.option).toBe('pool');
      expect(single.message).toMatch(/single Connection/);
      expect(single.message).toMatch(/createPool/);
      const callback = refusal(() => mysqlStore({ pool: callbackPool as never }));
      expect(callback.message).toMatch(/callback API/);
      expect(callback.message).toMatch(/pool\.promise\(\)/);
      expect(() => mysqlStore({ pool: callbackPool.promise() })).not.toThrow();
      expect(() => mysqlStore({ pool })).not.toThrow();
    } finally {
      connection.destroy();
      await pool.end();
      await new Promise<void>((resolve) => callbackPool.end(() => resolve()));
    }
  });

  it('redisStore: takes ioredis and node-redis 5+ (standalone and Cluster, RESP2 or RESP3); refuses anything else and node-redis before 5, saying why', () => {
    const ioredis = new Redis({ lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    const logger = { warn: () => {}, error: () => {} };
    try {
      expect(() => redisStore({ client: ioredis })).not.toThrow();
      expect(() => redisStore({ client: createClient({ disableOfflineQueue: true }), logger })).not.toThrow();
      expect(() => redisStore({ client: createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] }), logger })).not.toThrow();
      const neither = refusal(() => redisStore({ client: { get: () => {} } as never }));
      expect(neither.option).toBe('client');
      expect(neither.message).toMatch(/ioredis Redis or Cluster, or a node-redis/);
      expect(neither.message).toMatch(/neither `callBuffer\(\)` \(ioredis\) nor `sendCommand\(\)` \(node-redis\)/);
      // node-redis 4 has sendCommand but no per-command type mapping: its replies would be text.
      const v4 = refusal(() => redisStore({ client: { sendCommand: async () => null } as never }));
      expect(v4.message).toMatch(/before version 5: upgrade to redis 5 or later/);
      // RESP3 (node-redis 6's default) reads as RESP2 does: the contract runs on both (test/stores/redis.test.ts).
      expect(() => redisStore({ client: createClient({ RESP: 3 }), logger })).not.toThrow();
      expect(() => redisStore({ client: createClient({ RESP: 2 }), logger })).not.toThrow();
      // A Sentinel client's sendCommand takes other arguments: refused, naming what works instead.
      const sentinel = refusal(() => redisStore({ client: createSentinel({ name: 'mymaster', sentinelRootNodes: [{ host: '127.0.0.1', port: 1 }] }) as never, logger }));
      expect(sentinel.option).toBe('client');
      expect(sentinel.message).toContain('a node-redis Sentinel client (createSentinel()) is not supported: use ioredis');
    } finally {
      ioredis.disconnect();
    }
  });
});
