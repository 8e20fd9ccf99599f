/**
 * What `listAbandoned` (the completer's listing) and `endLeasesOf` (an instance restart) read, on
 * each SQL store, with 100,000 completed records and 100 in flight: 50 abandoned (lease over,
 * window open) and 50 live, 25 of them under one incarnation. Prints the plans the servers choose
 * for the store's own statements, and what they read (PostgreSQL: rows and buffers from
 * EXPLAIN (ANALYZE, BUFFERS); MariaDB: ANALYZE's r_rows and the Handler_read counters; SQLite:
 * EXPLAIN QUERY PLAN and the median time of one run, without and with ANALYZE statistics). Run it on a commit to see that commit's
 * statements and schema:
 *
 *   node --conditions=idemkit-source --import tsx bench/listing-plans.ts
 *   LISTING_POSTGRES=postgres://… LISTING_MYSQL=mysql://… LISTING_STORES=postgres,sqlite,mysql
 *
 * PostgreSQL runs each listing twice before and after a VACUUM: the 100,000 completions are
 * UPDATEs, and until a vacuum the dead versions they leave are still in the table, and in an
 * index on in-flight records (the first scan marks them dead in the index; later scans skip them
 * without reading the table). Autovacuum is off on the bench table so that the moment is chosen.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import { createPool } from 'mysql2/promise';
import type { RowDataPacket } from 'mysql2/promise';
import pg from 'pg';
import { mysqlStore } from '../src/stores/mysql/index.js';
import { statements as mysqlStatements } from '../src/stores/mysql/sql.js';
import { postgresStore } from '../src/stores/postgres/index.js';
import { postgresStatements, resolveNames } from '../src/stores/postgres/sql.js';
import { sqliteStore } from '../src/stores/sqlite/index.js';
import { sqliteStatements } from '../src/stores/sqlite/sql.js';

const COMPLETED = 100_000;
const ABANDONED = 50;
const LIVE = 50;
const OF_INCARNATION = 25;
const INCARNATION = 'feedc0de12345678';
const LIMIT = 100;
const STORES = (process.env.LISTING_STORES ?? 'postgres,sqlite,mysql').split(',');
const POSTGRES = process.env.LISTING_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';
const MYSQL = process.env.LISTING_MYSQL ?? 'mysql://root@127.0.0.1:3306/test';
const table = `listing_${randomBytes(4).toString('hex')}`;

const heading = (text: string) => console.log(`\n## ${text}\n`);
const block = (lines: string) => console.log(`\`\`\`\n${lines.trimEnd()}\n\`\`\``);

async function postgres(): Promise<void> {
  const pool = new pg.Pool({ connectionString: POSTGRES, max: 2 });
  pool.on('error', () => {});
  const store = postgresStore({ pool, table });
  const sql = postgresStatements(resolveNames({ table }));
  const t = `"public"."${table}"`;
  try {
    await store.migrate();
    await pool.query(`ALTER TABLE ${t} SET (autovacuum_enabled = false)`);
    // Each completed record as the store leaves it: claimed (in flight), then completed by an UPDATE.
    await pool.query(
      `INSERT INTO ${t} (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, created_at, updated_at)
       SELECT 'bench', 'c' || i, 'fp', 'in_flight', md5(i::text), 1,
              now() - interval '2 hours' + i * interval '50 ms' + interval '30 s', now() - interval '2 hours' + i * interval '50 ms' + interval '1 day',
              now() - interval '2 hours' + i * interval '50 ms', now() - interval '2 hours' + i * interval '50 ms'
         FROM generate_series(1, ${COMPLETED}) AS i`,
    );
    await pool.query(
      `UPDATE ${t} SET state = 'completed', status = 201, headers = '[["content-type","application/json"]]',
              body = convert_to(repeat('x', 200), 'UTF8'), updated_at = updated_at + interval '20 ms' WHERE scope = 'bench'`,
    );
    await pool.query(
      `INSERT INTO ${t} (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, created_at, updated_at)
       SELECT 'bench', 'a' || i, 'fp', 'in_flight', md5('a' || i), 1, now() - i * interval '1 s', now() + interval '1 day', now() - interval '1 min', now() - interval '1 min'
         FROM generate_series(1, ${ABANDONED}) AS i
       UNION ALL
       SELECT 'bench', 'l' || i, 'fp', 'in_flight', CASE WHEN i <= ${OF_INCARNATION} THEN '${INCARNATION}' || left(md5('l' || i), 16) ELSE md5('l' || i) END,
              1, now() + interval '30 s', now() + interval '1 day', now(), now()
         FROM generate_series(1, ${LIVE}) AS i`,
    );
    await pool.query(`ANALYZE ${t}`);
    const indexes = await pool.query(`SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY indexname`, [table]);
    heading(`PostgreSQL (${(await pool.query('SHOW server_version')).rows[0].server_version}): indexes ${indexes.rows.map((r) => r.indexname.replace(table, '<table>')).join(', ')}`);
    const explain = async (text: string, values: unknown[]) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${text}`, values);
        await client.query('ROLLBACK');
        return rows.map((r) => r['QUERY PLAN'] as string).join('\n').replaceAll(table, '<table>');
      } finally {
        client.release();
      }
    };
    for (const moment of ['after the completions, before a vacuum', 'after VACUUM']) {
      if (moment === 'after VACUUM') await pool.query(`VACUUM ANALYZE ${t}`);
      for (const run of ['first run', 'second run']) {
        console.log(`listAbandoned(${LIMIT}), ${moment}, ${run}:`);
        block(await explain(sql.listAbandoned, [LIMIT]));
      }
      console.log(`endLeasesOf, ${moment} (rolled back):`);
      block(await explain(sql.endLeasesOf, [INCARNATION]));
    }
  } finally {
    await pool.query(`DROP FUNCTION IF EXISTS "public"."${table}_claim"; DROP TABLE IF EXISTS "public"."${table}"`);
    await pool.end();
  }
}

function sqlite(): void {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-listing-'));
  const db = new Database(join(dir, 'records.db'));
  try {
    const store = sqliteStore({ database: db, table });
    const now = Date.now();
    db.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${COMPLETED})
       INSERT INTO ${table} (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, status, headers, body, body_omitted, created_at, updated_at)
       SELECT 'bench', 'c' || i, 'fp', 'completed', '', 1, @now - 7200000 + i * 50 + 30000, @now - 7200000 + i * 50 + 86400000, 201, '[]', randomblob(200), 0,
              @now - 7200000 + i * 50, @now - 7200000 + i * 50 + 20 FROM n`,
    ).run({ now });
    const inFlight = db.prepare(
      `INSERT INTO ${table} (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, body_omitted, created_at, updated_at)
       VALUES ('bench', @key, 'fp', 'in_flight', @token, 1, @lease, @now + 86400000, 0, @now, @now)`,
    );
    for (let i = 1; i <= ABANDONED; i++) inFlight.run({ key: `a${i}`, token: randomBytes(16).toString('hex'), lease: now - i * 1000, now });
    for (let i = 1; i <= LIVE; i++) {
      const token = i <= OF_INCARNATION ? INCARNATION + randomBytes(8).toString('hex') : randomBytes(16).toString('hex');
      inFlight.run({ key: `l${i}`, token, lease: now + 30_000, now });
    }
    const sql = sqliteStatements(db, table);
    const indexes = (db.prepare(`SELECT name FROM pragma_index_list('${table}') ORDER BY name`).all() as Array<{ name: string }>).map((r) => r.name.replace(table, '<table>'));
    heading(`SQLite (${(db.prepare('SELECT sqlite_version() AS v').get() as { v: string }).v}): indexes ${indexes.join(', ')}`);
    // better-sqlite3 keeps each statement's text as `source`.
    const sourceOf = (statement: object) => (statement as { source: string }).source;
    const plan = (source: string, params: object) =>
      (db.prepare(`EXPLAIN QUERY PLAN ${source}`).all(params) as Array<{ detail: string }>).map((r) => r.detail.replaceAll(table, '<table>')).join('\n');
    const median = (fn: () => unknown) => {
      const times: number[] = [];
      for (let i = 0; i < 21; i++) {
        const start = process.hrtime.bigint();
        fn();
        times.push(Number(process.hrtime.bigint() - start) / 1e3);
      }
      return times.sort((a, b) => a - b)[10]!.toFixed(0);
    };
    const listParams = { now: Date.now(), limit: LIMIT };
    const listed = sql.abandoned.all(listParams).length;
    console.log(`listAbandoned(${LIMIT}): ${listed} rows, median ${median(() => sql.abandoned.all(listParams))} µs of 21 runs`);
    block(plan(sourceOf(sql.abandoned), listParams));
    const endParams = { now: Date.now(), incarnation: INCARNATION };
    db.exec('BEGIN');
    const ended = sql.endLeasesOf.run(endParams).changes;
    db.exec('ROLLBACK');
    // Rolled back each time, so every run ends the same leases.
    const endOnce = () => {
      db.exec('BEGIN');
      sql.endLeasesOf.run(endParams);
      db.exec('ROLLBACK');
    };
    console.log(`endLeasesOf: ${ended} rows, median ${median(endOnce)} µs of 21 runs (each rolled back)`);
    block(plan(sourceOf(sql.endLeasesOf), endParams));
    // PRAGMA optimize runs ANALYZE on a table whose statistics it deems stale: the plans with them.
    db.exec('ANALYZE');
    console.log(`After ANALYZE: listAbandoned(${LIMIT}), median ${median(() => sql.abandoned.all(listParams))} µs`);
    block(plan(sourceOf(sql.abandoned), listParams));
    console.log(`endLeasesOf, median ${median(endOnce)} µs`);
    block(plan(sourceOf(sql.endLeasesOf), endParams));
    store.close();
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function mysql(): Promise<void> {
  const pool = createPool({ uri: MYSQL, connectionLimit: 1 });
  const store = mysqlStore({ pool, table });
  const sql = mysqlStatements(table);
  const t = `\`${table}\``;
  const now = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)`;
  try {
    await store.migrate();
    await pool.query('SET SESSION cte_max_recursion_depth = 1000000').catch(() => {});
    await pool.query('SET SESSION max_recursive_iterations = 1000000').catch(() => {});
    await pool.query(
      `INSERT INTO ${t} (scope, idem_key, fingerprint, state, token, revision, attempt, lease_until, expires_at, status, headers, body, created_at, updated_at)
       WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${COMPLETED})
       SELECT 'bench', CONCAT('c', i), 'fp', 'completed', '', 2, 1, ${now} - 7200000 + i * 50 + 30000, ${now} - 7200000 + i * 50 + 86400000, 201, '[]', REPEAT('x', 200),
              ${now} - 7200000 + i * 50, ${now} - 7200000 + i * 50 + 20 FROM n`,
    );
    await pool.query(
      `INSERT INTO ${t} (scope, idem_key, fingerprint, state, token, revision, attempt, lease_until, expires_at, created_at, updated_at)
       WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ABANDONED + LIVE})
       SELECT 'bench', CONCAT(IF(i <= ${ABANDONED}, 'a', 'l'), i), 'fp', 'in_flight',
              IF(i > ${ABANDONED} AND i <= ${ABANDONED + OF_INCARNATION}, CONCAT('${INCARNATION}', LEFT(MD5(i), 16)), MD5(i)), 1, 1,
              IF(i <= ${ABANDONED}, ${now} - i * 1000, ${now} + 30000), ${now} + 86400000, ${now}, ${now} FROM n`,
    );
    await pool.query(`ANALYZE TABLE ${t}`);
    const [version] = await pool.query<RowDataPacket[]>('SELECT VERSION() AS v');
    const [indexes] = await pool.query<RowDataPacket[]>(`SHOW INDEX FROM ${t}`);
    const names = [...new Set(indexes.map((i) => `${i.Key_name}`))].map((name) => `${name} (${indexes.filter((i) => i.Key_name === name).map((i) => i.Column_name).join(', ')})`);
    heading(`MariaDB/MySQL (${version[0]!.v}): indexes ${names.join(', ')}`);
    const conn = await pool.getConnection();
    try {
      const tabulate = (rows: RowDataPacket[]) => {
        const columns = ['select_type', 'table', 'type', 'possible_keys', 'key', 'key_len', 'rows', 'r_rows', 'filtered', 'r_filtered', 'Extra'];
        const present = columns.filter((c) => c in rows[0]!);
        return [present.join(' | '), ...rows.map((r) => present.map((c) => String(r[c] ?? 'NULL')).join(' | '))].join('\n').replaceAll(table, '<table>');
      };
      const handlers = async () => {
        const [rows] = await conn.query<RowDataPacket[]>(`SHOW SESSION STATUS LIKE 'Handler_read%'`);
        return new Map(rows.map((r) => [String(r.Variable_name), Number(r.Value)]));
      };
      const measured = async (label: string, text: string, values: unknown[]) => {
        await conn.query('START TRANSACTION');
        const before = await handlers();
        const [result] = await conn.query(text, values);
        const after = await handlers();
        await conn.query('ROLLBACK');
        const reads = [...after].map(([name, n]) => [name, n - (before.get(name) ?? 0)] as const).filter(([, n]) => n > 0);
        const affected = Array.isArray(result) ? `${result.length} rows` : `${(result as { affectedRows: number }).affectedRows} rows changed`;
        // The counters include the SHOW STATUS itself (a few reads of its own); the rows scanned dominate.
        console.log(`${label}: ${affected}; ${reads.map(([name, n]) => `${name} ${n}`).join(', ')}`);
        await conn.query('START TRANSACTION');
        const [analyzed] = await conn.query<RowDataPacket[]>(`ANALYZE ${text}`, values);
        await conn.query('ROLLBACK');
        block(tabulate(analyzed));
      };
      await measured(`listAbandoned(${LIMIT})`, sql.listAbandoned(LIMIT), []);
      await measured('endLeasesOf (rolled back)', sql.endLeasesOf, [INCARNATION]);
    } finally {
      conn.release();
    }
  } finally {
    await pool.query(`DROP TABLE IF EXISTS ${t}`);
    await pool.end();
  }
}

console.log(`# listAbandoned and endLeasesOf: ${COMPLETED} completed records, ${ABANDONED} abandoned, ${LIVE} live (${OF_INCARNATION} of one incarnation)`);
if (STORES.includes('postgres')) await postgres();
if (STORES.includes('sqlite')) sqlite();
if (STORES.includes('mysql')) await mysql();
