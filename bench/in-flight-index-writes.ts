/**
 * What the in-flight index costs a request on PostgreSQL: claim + complete of new keys through
 * the store, on two tables migrated alike, one of them with `<table>_in_flight` dropped,
 * alternating batches so that both see the same machine. Per request: WAL bytes (the server's
 * insert position before and after each batch: other sessions writing meanwhile would add to
 * both sides), the time, and, per table, how many of the completions were HOT updates (no new
 * index entries).
 *
 *   node --conditions=idemkit-source --import tsx bench/in-flight-index-writes.ts
 *   WRITES_POSTGRES=postgres://… WRITES_BATCH=500 WRITES_ROUNDS=6
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { postgresStore } from '../src/stores/postgres/index.js';
import type { StoredResponse } from '../src/core/store.js';

const POSTGRES = process.env.WRITES_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';
const BATCH = Number(process.env.WRITES_BATCH ?? 500);
const ROUNDS = Number(process.env.WRITES_ROUNDS ?? 6);
const CONCURRENCY = 8;
const RESPONSE: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: new TextEncoder().encode(JSON.stringify({ id: 'x'.repeat(180) })), bodyOmitted: false };

const pool = new pg.Pool({ connectionString: POSTGRES, max: CONCURRENCY });
pool.on('error', () => {});
const tables = { with: `writes_${randomBytes(4).toString('hex')}`, without: `writes_${randomBytes(4).toString('hex')}` };
const stores = { with: postgresStore({ pool, table: tables.with }), without: postgresStore({ pool, table: tables.without }) };
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

async function batch(kind: 'with' | 'without'): Promise<{ walBytes: number; micros: number }> {
  const store = stores[kind];
  const lsn = async () => String((await pool.query('SELECT pg_current_wal_insert_lsn() AS l')).rows[0].l);
  const before = await lsn();
  const start = process.hrtime.bigint();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < BATCH) {
        next++;
        const ref = { scope: 'bench', key: randomBytes(8).toString('hex') };
        const claim = await store.claim(ref, 'fp', { leaseMs: 30_000, windowMs: 86_400_000 });
        if (claim.kind !== 'acquired') throw new Error(claim.kind);
        await store.complete(ref, claim.token, RESPONSE);
      }
    }),
  );
  const micros = Number(process.hrtime.bigint() - start) / 1e3 / BATCH;
  const walBytes = Number((await pool.query('SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1) AS d', [before])).rows[0].d) / BATCH;
  return { walBytes, micros };
}

try {
  await stores.with.migrate();
  await stores.without.migrate();
  await pool.query(`DROP INDEX "public"."${tables.without}_in_flight"`);
  for (const t of Object.values(tables)) await pool.query(`ALTER TABLE "public"."${t}" SET (autovacuum_enabled = false)`);
  const results = { with: [] as Array<{ walBytes: number; micros: number }>, without: [] as Array<{ walBytes: number; micros: number }> };
  for (let round = 0; round < ROUNDS; round++) {
    const order: Array<'with' | 'without'> = round % 2 === 0 ? ['with', 'without'] : ['without', 'with'];
    for (const kind of order) results[kind].push(await batch(kind));
  }
  // Counters reach pg_stat_user_tables when a backend reports them: end the pool's sessions first.
  await pool.end();
  const reader = new pg.Client({ connectionString: POSTGRES });
  await reader.connect();
  console.log(`PostgreSQL, claim + complete of ${BATCH * ROUNDS} new keys per table, ${CONCURRENCY} at a time, batches of ${BATCH} alternated (median of ${ROUNDS}):\n`);
  console.log('| table | WAL bytes per request | µs per request | completions that were HOT updates | index sizes |');
  console.log('|---|---|---|---|---|');
  for (const kind of ['without', 'with'] as const) {
    const t = tables[kind];
    let stats: { n_tup_upd: string; n_tup_hot_upd: string } | undefined;
    for (let i = 0; i < 50 && (stats === undefined || stats.n_tup_upd === '0'); i++) {
      stats = (await reader.query(`SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = $1`, [t])).rows[0];
      if (stats?.n_tup_upd === '0') await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const sizes = (await reader.query(
      `SELECT replace(c.relname, $1, '<table>') AS name, pg_size_pretty(pg_relation_size(c.oid)) AS size FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = $2::regclass ORDER BY 1`,
      [t, `"public"."${t}"`],
    )).rows.map((r) => `${r.name} ${r.size}`).join(', ');
    const label = kind === 'with' ? 'with `<table>_in_flight`' : 'without it';
    console.log(`| ${label} | ${median(results[kind].map((r) => r.walBytes)).toFixed(0)} | ${median(results[kind].map((r) => r.micros)).toFixed(0)} | ${stats?.n_tup_hot_upd ?? '?'} of ${stats?.n_tup_upd ?? '?'} | ${sizes} |`);
  }
  for (const t of Object.values(tables)) await reader.query(`DROP FUNCTION IF EXISTS "public"."${t}_claim"; DROP TABLE IF EXISTS "public"."${t}"`);
  await reader.end();
} catch (error) {
  await pool.end().catch(() => {});
  throw error;
}
