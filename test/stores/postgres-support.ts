/**
 * Helpers for the PostgreSQL suites: pools on the shared local server, a unique table per run,
 * and a throwaway cluster for tests that must stop a server.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import type { PostgresClient, PostgresPool, PostgresQueryResult } from '../../src/drivers/postgres.js';
import { freePort, retryOnPortTaken } from '../support/ports.js';

const run = promisify(execFile);

/** The machine's shared server: trust auth, database `test`. Never stopped or reconfigured here. */
export const SHARED = { host: '127.0.0.1', port: 5432, user: process.env.PGUSER ?? 'postgres', database: 'test' } as const;

/** A pool whose idle-connection errors are expected in these suites (a pg Pool without a listener would crash). */
export function newPool(config: pg.PoolConfig = {}): pg.Pool {
  const pool = new pg.Pool({ ...SHARED, max: 5, ...config });
  pool.on('error', () => {});
  return pool;
}

export const uniqueTable = () => `idem_test_${randomBytes(5).toString('hex')}`;

export async function dropTable(pool: pg.Pool, table: string): Promise<void> {
  await pool.query(`DROP FUNCTION IF EXISTS "public"."${table}_claim"; DROP TABLE IF EXISTS "public"."${table}"`);
}

export { sleep, until } from '../support/until.js';

/** A structural pool that counts statements: each node-postgres query is one round trip. */
export function countingPool(pool: pg.Pool) {
  const seen: string[] = [];
  const counted = <T extends { query(text: string, values?: unknown[]): Promise<PostgresQueryResult> }>(target: T) =>
    (text: string, values?: unknown[]) => {
      seen.push(text.trim().split(/\s+/).slice(0, 3).join(' '));
      return target.query(text, values);
    };
  const wrapped: PostgresPool<PostgresClient & { readonly raw: pg.PoolClient }> = {
    query: counted(pool),
    async connect() {
      const raw = await pool.connect();
      return {
        raw,
        query: counted(raw),
        release: (error?: Error | boolean) => raw.release(error),
        on: (event: 'error', listener: (error: Error) => void) => raw.on(event, listener),
        removeListener: (event: 'error', listener: (error: Error) => void) => raw.removeListener(event, listener),
      };
    },
  };
  return {
    pool: wrapped,
    /** Statements since the last call, as their first three words. */
    take(): string[] {
      return seen.splice(0);
    },
  };
}

/**
 * A private PostgreSQL cluster in a temp dir, for tests that stop the server. initdb refuses to
 * run as root, so as root the binaries run as the `postgres` user, in a dir that user owns.
 */
export class ThrowawayCluster {
  private constructor(
    readonly dir: string,
    readonly port: number,
    private readonly asUser: string[],
  ) {}

  static async available(): Promise<boolean> {
    try {
      await run('initdb', ['--version']);
      return true;
    } catch {
      return false;
    }
  }

  static async create(): Promise<ThrowawayCluster> {
    const dir = mkdtempSync(join(tmpdir(), 'idemkit-pg-'));
    const asUser: string[] = [];
    if (process.getuid?.() === 0) {
      const uid = Number((await run('id', ['-u', 'postgres'])).stdout);
      const gid = Number((await run('id', ['-g', 'postgres'])).stdout);
      chownSync(dir, uid, gid);
      asUser.push('runuser', '-u', 'postgres', '--');
    }
    // initdb takes no port: a cluster with none runs it once, whatever port the start below ends on.
    await new ThrowawayCluster(dir, 0, asUser).exec('initdb', ['-D', join(dir, 'data'), '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8']);
    // Another port when the free one was taken before the server bound it. Later starts (after
    // stopImmediately) keep the port: the tests reconnect to the same server.
    return retryOnPortTaken(async () => {
      const cluster = new ThrowawayCluster(dir, await freePort(), asUser);
      await cluster.start();
      return cluster;
    });
  }

  get data(): string {
    return join(this.dir, 'data');
  }

  async start(): Promise<void> {
    const settings = `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off`;
    const log = join(this.dir, 'log');
    const logged = existsSync(log) ? statSync(log).size : 0;
    try {
      await this.exec('pg_ctl', ['-D', this.data, '-l', log, '-o', settings, '-w', 'start']);
    } catch (error) {
      // pg_ctl only says "could not start server"; the server's log says why (a taken port: "could
      // not bind IPv4 address ...: Address already in use"). Only this start's part of the log.
      const why = existsSync(log) ? readFileSync(log).subarray(logged).toString() : '';
      throw new Error(`${(error as Error).message}\n${why}`, { cause: error });
    }
  }

  /** Stops the server the hard way, as a crash would (recovery runs on the next start). */
  async stopImmediately(): Promise<void> {
    await this.exec('pg_ctl', ['-D', this.data, '-m', 'immediate', '-w', 'stop']);
  }

  /** Stops the server if it runs (by pg_ctl, then by the pid in postmaster.pid) and removes the dir. */
  async destroy(): Promise<void> {
    await this.stopImmediately().catch(() => {});
    const pidFile = join(this.data, 'postmaster.pid');
    if (existsSync(pidFile)) {
      const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
      if (Number.isInteger(pid) && pid > 0) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  pool(config: pg.PoolConfig = {}): pg.Pool {
    return newPool({ host: '127.0.0.1', port: this.port, user: 'postgres', database: 'postgres', ...config });
  }

  private async exec(command: string, args: string[]): Promise<void> {
    const [file, ...rest] = [...this.asUser, command, ...args] as [string, ...string[]];
    await run(file, rest, { cwd: this.dir });
  }
}
