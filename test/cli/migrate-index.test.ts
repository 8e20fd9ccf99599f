/**
 * `idemkit migrate` on a table an earlier idemkit made, without the in-flight index: it adds the
 * index and says so, without first warning (on stderr) that the index is missing; the commands
 * that only use the table keep that warning, since migrate is then the fix.
 */
import { randomBytes } from 'node:crypto';
import { createPool } from 'mysql2/promise';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { MARIADB, POSTGRES, requireService } from '../support/services.js';
import { runCli } from '../check/cli.js';

const [pgUp, mysqlUp] = [await requireService(POSTGRES), await requireService(MARIADB)];
const name = () => `cli_index_${randomBytes(4).toString('hex')}`;

async function olderTableThenMigrate(url: string, table: string): Promise<void> {
  const stats = await runCli(['stats', '--store', url, '--table', table]);
  expect(stats.code).toBe(0);
  expect(stats.stderr).toMatch(/in_flight/);
  const migrated = await runCli(['migrate', '--store', url, '--table', table]);
  expect(migrated.code).toBe(0);
  expect(migrated.stderr).toBe('');
  expect(migrated.stdout).toMatch(/index \S*in_flight/);
  const after = await runCli(['stats', '--store', url, '--table', table]);
  expect(after.stderr).toBe('');
}

describe.skipIf(!pgUp)('idemkit migrate adds the in-flight index on PostgreSQL', () => {
  it('without warning of what it adds', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:5432/test', max: 2 });
    const table = name();
    try {
      await postgresStore({ pool, table }).migrate();
      await pool.query(`DROP INDEX "public"."${table}_in_flight"`);
      await olderTableThenMigrate('postgres://postgres@127.0.0.1:5432/test', table);
    } finally {
      await pool.query(`DROP FUNCTION IF EXISTS "public"."${table}_claim"; DROP TABLE IF EXISTS "public"."${table}"`);
      await pool.end();
    }
  }, 60_000);
});

describe.skipIf(!mysqlUp)('idemkit migrate adds the in-flight index on MySQL/MariaDB', () => {
  it('without warning of what it adds', async () => {
    const pool = createPool({ uri: 'mysql://root@127.0.0.1:3306/test', connectionLimit: 2 });
    const table = name();
    try {
      await mysqlStore({ pool, table }).migrate();
      await pool.query(`ALTER TABLE \`${table}\` DROP INDEX in_flight`);
      await olderTableThenMigrate('mysql://root@127.0.0.1:3306/test', table);
    } finally {
      await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
      await pool.end();
    }
  }, 60_000);
});
