/**
 * Helpers for the MySQL store suite: a pool wrapper that sees every statement, and a forwarder
 * whose open connections can be frozen for good while new ones still pass.
 */
import { createServer } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import type { Pool, PoolConnection } from 'mysql2/promise';
import type { MysqlPool } from '../../src/drivers/mysql.js';
import type { MysqlConnection } from '../../src/stores/mysql/store.js';

type Result = [unknown, unknown];

export interface SpyOptions {
  /** Runs instead of each `execute`; `run` performs the real one. */
  readonly onExecute?: (sql: string, run: () => Promise<Result>, connection: PoolConnection) => Promise<Result>;
}

/** Wraps a mysql2 pool: counts every statement sent (one round trip each) and every destroyed connection. */
export function spyPool(pool: Pool, options: SpyOptions = {}) {
  const statements: string[] = [];
  let destroyed = 0;
  const wrapped: MysqlPool = {
    async getConnection(): Promise<MysqlConnection> {
      const c = await pool.getConnection();
      const sent = <T>(sql: string, work: () => Promise<T>) => {
        statements.push(sql);
        return work();
      };
      return {
        execute: (o, values) => {
          statements.push(o.sql);
          const run = () => c.execute(o, values) as Promise<Result>;
          return options.onExecute ? options.onExecute(o.sql, run, c) : run();
        },
        query: (sql) => sent(sql, () => c.query(sql)),
        beginTransaction: () => sent('START TRANSACTION', () => c.beginTransaction()),
        commit: () => sent('COMMIT', () => c.commit()),
        rollback: () => sent('ROLLBACK', () => c.rollback()),
        release: () => c.release(),
        destroy: () => {
          destroyed++;
          c.destroy();
        },
      };
    },
  };
  return {
    pool: wrapped,
    /** Statements sent since the last call. */
    take(): string[] {
      return statements.splice(0);
    },
    destroyed: () => destroyed,
  };
}

/** A server that accepts TCP connections and never says a word: a hung database host. */
export async function startSilentServer(): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => void sockets.add(socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
