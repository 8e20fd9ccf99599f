/**
 * Issue 26 item 3: writes outside `ctx.tx` (through the ORM's own database object or the pool)
 * are outside the guarantee. Shown on Kysely over PostgreSQL: one throw and one retry leave one
 * row written through `ctx.tx` and two written through `db`. And the places users read say so.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { withIdempotency } from '../../src/http/web.js';
import { kyselyTransactions } from '../../src/orm/kysely.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { POSTGRES, requireService } from '../support/services.js';
import { POSTGRES_URL } from './backends.js';

const root = join(import.meta.dirname, '..', '..');
const read = (file: string) => readFileSync(join(root, file), 'utf8').replace(/\s+/g, ' ');

describe.skipIf(!(await requireService(POSTGRES)))('a write through the ORM\'s own db, beside ctx.tx', () => {
  const suffix = randomUUID().slice(0, 8);
  const table = `outside_idem_${suffix}`;
  const inside = `outside_tx_${suffix}`;
  const outside = `outside_db_${suffix}`;
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
  pool.on('error', () => {});
  const db = new Kysely<Record<string, { key: string }>>({ dialect: new PostgresDialect({ pool }) });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${inside}, ${outside}; DROP TABLE IF EXISTS ${table} CASCADE; DROP FUNCTION IF EXISTS ${table}_claim CASCADE`);
    await db.destroy();
  });

  it('is committed at once: a throw and one retry leave it twice, and the ctx.tx write once', async () => {
    const plain = postgresStore({ pool, table });
    await plain.migrate();
    await pool.query(`CREATE TABLE ${inside} (key text NOT NULL); CREATE TABLE ${outside} (key text NOT NULL)`);
    let calls = 0;
    const logged: unknown[] = [];
    const handler = withIdempotency(
      async (_request, ctx) => {
        await ctx!.tx.insertInto(inside).values({ key: ctx!.key }).execute();
        await db.insertInto(outside).values({ key: ctx!.key }).execute();
        if (++calls === 1) throw new Error('the first attempt fails after both writes');
        return new Response('ok', { status: 201 });
      },
      { store: kyselyTransactions(plain, db), transactional: true, scope: () => 'outside', logger: { warn: () => {}, error: (...args) => logged.push(...args) } },
    );
    const key = randomUUID();
    const request = () => handler(new Request('http://x/pay', { method: 'POST', headers: { 'idempotency-key': key } }));
    expect((await request()).status).toBe(500);
    expect((await request()).status).toBe(201);
    expect(calls).toBe(2);
    expect(logged).toContainEqual(expect.objectContaining({ message: 'the first attempt fails after both writes' }));
    const count = async (name: string) => Number((await pool.query(`SELECT count(*) AS n FROM ${name} WHERE key = $1`, [key])).rows[0].n);
    expect(await count(inside)).toBe(1);
    expect(await count(outside)).toBe(2);
  });
});

describe('the docs say that writes outside ctx.tx are not covered', () => {
  it('docs/orm.md, docs/semantics.md, README.md and README.zh-CN.md, in their transactional sections', () => {
    const orm = read('docs/orm.md');
    expect(orm).toContain('## Writes outside `ctx.tx` are not covered');
    expect(orm).toMatch(/Only writes through `ctx\.tx` commit with the record\..*the retry runs the handler again and writes it a second time/);
    const semantics = read('docs/semantics.md');
    const transactional = semantics.slice(semantics.indexOf('## Transactional mode'), semantics.indexOf('## Stores without a shared transaction'));
    expect(transactional).toMatch(/\*\*Writes outside `ctx\.tx` are not covered\.\*\*.*the retry writes it again/);
    const readme = read('README.md');
    expect(readme.slice(readme.indexOf('**Transactional mode**'), readme.indexOf('**One example per ORM**'))).toMatch(/Only writes through `ctx\.tx` are covered/);
    const zh = read('README.zh-CN.md');
    expect(zh.slice(zh.indexOf('- **事务模式**'), zh.indexOf('**每个 ORM 一个可运行示例**'))).toMatch(/只有经 `ctx\.tx` 的写入受保护/);
  });
});
