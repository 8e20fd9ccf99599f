// Compile-time check: the real driver types are accepted by sqlExecutor and the Redis guards.
import type Database from 'better-sqlite3';
import type { Redis, Cluster } from 'ioredis';
import type { Connection, Pool, PoolConnection } from 'mysql2/promise';
import type pg from 'pg';
import { oneTimeTokens, redisLock, sqlExecutor } from '../../src/patterns/index.js';

export function accepts(d: {
  pgPool: pg.Pool;
  pgClient: pg.Client;
  pgPoolClient: pg.PoolClient;
  sqlite: Database.Database;
  mysqlPool: Pool;
  mysqlConn: Connection;
  mysqlPoolConn: PoolConnection;
  redis: Redis;
  cluster: Cluster;
}): unknown[] {
  return [
    sqlExecutor(d.pgPool),
    sqlExecutor(d.pgClient),
    sqlExecutor(d.pgPoolClient, { joined: true }),
    sqlExecutor(d.sqlite),
    sqlExecutor(d.mysqlPool),
    sqlExecutor(d.mysqlConn),
    sqlExecutor(d.mysqlPoolConn, { joined: true }),
    oneTimeTokens(d.redis, { prefix: 'p:' }),
    redisLock(d.cluster, { prefix: 'p:' }),
  ];
}
