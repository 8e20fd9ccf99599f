import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createPool } from 'mysql2/promise';
import type { Pool, PoolConnection, PoolOptions, RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdemkitError, InvalidOptionError, LeaseLostError, StoreSchemaMissingError, StoreUnavailableError } from '../../src/core/errors.js';
import type { Claim, IdempotencyStore, RecordRef, StoredResponse } from '../../src/core/store.js';
import { withIdempotency } from '../../src/http/web.js';
import type { IdempotencyOptions } from '../../src/core/options.js';
import { mysqlSchema, mysqlStore } from '../../src/stores/mysql/index.js';
import { statements } from '../../src/stores/mysql/sql.js';
import { MARIADB, requireService } from '../support/services.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { sleep, until } from '../support/until.js';
import { describeStoreContract } from './contract.js';
import { spyPool, startSilentServer } from './mysql-helpers.js';
import { freePort } from '../support/ports.js';

const up = await requireService(MARIADB);

const BASE: PoolOptions = {
  host: MARIADB.host,
  port: MARIADB.port,
  user: 'root',
  database: 'test',
  connectionLimit: 8,
  connectTimeout: 2_000,
};
const run = randomUUID().replaceAll('-', '').slice(0, 10);
const tables: string[] = [];
/** A table of its own per test group, dropped after the run. */
const newTable = (tag: string) => {
  const name = `idemkit_${run}_${tag}`;
  tables.push(name, `${name}_effects`);
  return name;
};
const ref = (scope = `s-${randomUUID()}`): RecordRef => ({ scope, key: `k-${randomUUID()}` });
const ok = (text = '{"id":1}'): StoredResponse => ({
  status: 201,
  headers: [['content-type', 'application/json']],
  body: new TextEncoder().encode(text),
  bodyOmitted: false,
});
const acquire = async (store: IdempotencyStore, r: RecordRef, leaseMs = 10_000, windowMs = 60_000) => {
  const claim = await store.claim(r, 'fp', { leaseMs, windowMs });
  if (claim.kind !== 'acquired') throw new Error(`expected acquired, got ${claim.kind}`);
  return claim;
};
const count = async (pool: Pool, sql: string) => ((await pool.query<RowDataPacket[]>(sql))[0][0] as { n: number }).n;

describe.skipIf(!up)('mysql store on MariaDB', () => {
  let main: Pool;

  beforeAll(() => {
    main = createPool(BASE);
  });
  afterAll(async () => {
    if (!main) return;
    for (const table of tables) await main.query(`DROP TABLE IF EXISTS \`${table}\``);
    await main.end();
  });

  describeStoreContract('mysql', async () => {
    const pool = createPool(BASE);
    const store = mysqlStore({ pool, table: newTable('contract') });
    await store.migrate();
    // The store decides on the server's clock: moving time is really waiting.
    return { store, advance: sleep, close: () => pool.end() };
  });

  describe('schema', () => {
    it('migrates idempotently, also when several instances migrate at once', async () => {
      const table = newTable('migrate');
      const pools = Array.from({ length: 3 }, () => createPool({ ...BASE, connectionLimit: 2 }));
      try {
        await Promise.all(pools.flatMap((pool) => [1, 2].map(() => mysqlStore({ pool, table }).migrate())));
        await mysqlStore({ pool: main, table }).migrate();
        const [indexes] = await main.query<RowDataPacket[]>(`SHOW INDEX FROM \`${table}\``);
        expect(indexes.map((i) => `${i.Key_name}.${i.Column_name}`)).toEqual([
          'PRIMARY.scope',
          'PRIMARY.idem_key',
          'expires_at.expires_at',
          'in_flight.state',
          'in_flight.lease_until',
        ]);
        const store = mysqlStore({ pool: main, table });
        expect((await store.claim(ref(), 'fp', { leaseMs: 1000, windowMs: 5000 })).kind).toBe('acquired');
      } finally {
        await Promise.all(pools.map((pool) => pool.end()));
      }
    });

    it('creates the same table from sql/mysql.sql as from migrate(), and the store works on it', async () => {
      const fromFile = newTable('file');
      const fromStore = newTable('store');
      const file = readFileSync(join(import.meta.dirname, '../../sql/mysql.sql'), 'utf8');
      expect(file).toContain(mysqlSchema());
      await main.query(file.replace('`idempotency_records`', `\`${fromFile}\``));
      await mysqlStore({ pool: main, table: fromStore }).migrate();
      const ddl = async (table: string) =>
        ((await main.query<RowDataPacket[]>(`SHOW CREATE TABLE \`${table}\``))[0][0]!['Create Table'] as string).replace(table, 'T');
      expect(await ddl(fromFile)).toEqual(await ddl(fromStore));
      const store = mysqlStore({ pool: main, table: fromFile });
      const r = ref();
      const { token } = await acquire(store, r);
      await store.complete(r, token, ok());
      expect((await store.claim(r, 'fp', { leaseMs: 1000, windowMs: 5000 })).kind).toBe('completed');
    });

    it('verify() names a missing table and store.migrate(), and resolves once it is migrated', async () => {
      const table = newTable('verify');
      const store = mysqlStore({ pool: main, table });
      const error = await store.verify().then(() => undefined, (e: unknown) => e);
      expect(error).toBeInstanceOf(StoreSchemaMissingError);
      expect((error as StoreSchemaMissingError).code).toBe('ERR_IDEMKIT_STORE_SCHEMA_MISSING');
      expect((error as StoreSchemaMissingError).missing).toEqual([`table ${table} (in the connection's database)`]);
      expect((error as Error).message).toContain('await store.migrate()');
      await store.migrate();
      await expect(store.verify()).resolves.toBeUndefined();
    });

    it('an unmigrated table: every request answers 500 store-schema-missing without Retry-After, and one error line names the table and the fix', async () => {
      const table = newTable('unmigrated');
      const store = mysqlStore({ pool: main, table });
      const lines: Array<{ level: string; message: string }> = [];
      const logger = {
        warn: (message: string) => lines.push({ level: 'warn', message }),
        error: (message: string) => lines.push({ level: 'error', message }),
      };
      let executed = 0;
      const handle = withIdempotency(() => new Response(`ok ${++executed}`, { status: 201 }), { store, logger });
      const post = () => handle(new Request('http://local/orders', { method: 'POST', headers: { 'idempotency-key': `k-${randomUUID()}` }, body: 'x' }));
      for (let i = 0; i < 20; i++) {
        const response = await post();
        expect(response.status).toBe(500);
        expect(response.headers.get('retry-after')).toBeNull();
        const problem = (await response.json()) as Record<string, unknown>;
        expect(problem).toMatchObject({ type: 'urn:idemkit:problem:store-schema-missing', status: 500 });
        expect(JSON.stringify(problem)).not.toContain(table);
      }
      expect(lines).toEqual([
        {
          level: 'error',
          message: `idemkit: ERR_IDEMKIT_STORE_SCHEMA_MISSING: mysql store: missing table ${table} (in the connection's database); run \`await store.migrate()\` or \`idemkit migrate\` (or apply sql/mysql.sql for the default name)`,
        },
      ]);
      expect(executed).toBe(0);
      // Migrated, the same store serves at once: nothing was cached about the missing schema.
      await store.migrate();
      expect((await post()).status).toBe(201);
      expect(executed).toBe(1);
    });

    it('a table without the columns this version writes: a completion fails as store-schema-missing naming them, not as an outage', async () => {
      const table = newTable('columnless');
      const store = mysqlStore({ pool: main, table });
      await store.migrate();
      const r = ref();
      const { token } = await acquire(store, r);
      await main.query(`ALTER TABLE \`${table}\` DROP COLUMN updated_at`);
      const error = await store.complete(r, token, ok()).then(() => undefined, (e: unknown) => e);
      expect(error).toBeInstanceOf(StoreSchemaMissingError);
      expect((error as StoreSchemaMissingError).missing).toEqual([`column ${table}.updated_at`]);
    });

    it('upgrades a table of the previous schema in place: old rows stay readable with unknown times, new ones are stamped', async () => {
      const table = newTable('upgrade');
      // The previous release's sql/mysql.sql, on this table.
      const previous = readFileSync(join(import.meta.dirname, 'fixtures/mysql-before-timestamps.sql'), 'utf8');
      await main.query(previous.replace('`idempotency_records`', `\`${table}\``));
      const now = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)`;
      await main.query(
        `INSERT INTO \`${table}\` (scope, idem_key, fingerprint, state, token, revision, attempt, lease_until, expires_at, status, headers, body)
         VALUES ('t', 'done', 'fp', 'completed', '', 1, 1, ${now} - 60000, ${now} + 3600000, 201, '[]', 'x'),
                ('t', 'running', 'fp', 'in_flight', ?, 1, 1, ${now} - 60000, ${now} + 3600000, NULL, NULL, NULL)`,
        ['a'.repeat(32)],
      );
      const store = mysqlStore({ pool: main, table });
      await expect(store.verify()).rejects.toMatchObject({ missing: [`column ${table}.created_at`, `column ${table}.updated_at`] });
      expect(await store.migrate()).toEqual([`column ${table}.created_at`, `column ${table}.updated_at`, `index ${table}.in_flight`]);
      expect(await store.migrate()).toEqual([]);
      await expect(store.verify()).resolves.toBeUndefined();
      const o = { leaseMs: 10_000, windowMs: 60_000 };
      // The old rows replay and show unknown times, not 1970; olderThanMs judges them by their lease.
      expect(await store.claim({ scope: 't', key: 'done' }, 'fp', o)).toMatchObject({ kind: 'completed', response: { status: 201 } });
      expect(await store.admin.inspect({ scope: 't', key: 'done' })).toMatchObject({ state: 'completed', createdAt: null, updatedAt: null });
      // get() leaves them undefined (never 0, never 1970); so does listAbandoned for the old one in flight.
      const oldDone = await store.get({ scope: 't', key: 'done' });
      expect(oldDone).toMatchObject({ state: 'completed' });
      expect(oldDone!.createdAt).toBeUndefined();
      expect(oldDone!.updatedAt).toBeUndefined();
      const abandoned = (await store.listAbandoned(1000)).find((r) => r.scope === 't' && r.key === 'running');
      expect(abandoned).toMatchObject({ state: 'in_flight', createdAt: undefined, updatedAt: undefined });
      expect((await store.admin.list({ scope: 't', olderThanMs: 30_000 })).map((r) => r.key).sort()).toEqual(['done', 'running']);
      // A take-over of an old row is a change; its creation stays unknown.
      expect(await store.claim({ scope: 't', key: 'running' }, 'fp', o)).toMatchObject({ kind: 'acquired', takeover: true });
      const taken = await store.admin.inspect({ scope: 't', key: 'running' });
      expect(taken).toMatchObject({ attempt: 2, createdAt: null });
      expect(taken!.updatedAt).toBeGreaterThan(0);
      const takenGet = await store.get({ scope: 't', key: 'running' });
      expect(takenGet!.createdAt).toBeUndefined();
      expect(takenGet!.updatedAt).toBe(taken!.updatedAt);
      // New records get both, on the server's clock.
      expect((await store.claim({ scope: 't', key: 'new' }, 'fp', o)).kind).toBe('acquired');
      const fresh = await store.admin.inspect({ scope: 't', key: 'new' });
      expect(fresh!.createdAt).toBe(fresh!.updatedAt);
      expect(fresh!.createdAt!).toBeLessThanOrEqual(fresh!.now);
      expect(fresh!.createdAt!).toBeGreaterThan(fresh!.now - 60_000);
      expect(await store.get({ scope: 't', key: 'new' })).toMatchObject({ createdAt: fresh!.createdAt, updatedAt: fresh!.updatedAt });
    });

    describe('the in-flight index (listAbandoned, endLeasesOf)', () => {
      const indexColumns = async (table: string) =>
        ((await main.query<RowDataPacket[]>(`SHOW INDEX FROM \`${table}\` WHERE Key_name = 'in_flight'`))[0]).map((i) => `${i.Column_name}`);
      const warnings = () => {
        const lines: string[] = [];
        return { lines, logger: { warn: (message: string) => lines.push(message), error: (message: string) => lines.push(`error: ${message}`) } };
      };

      it('is added to a table of the previous schema once, by several instances migrating at once; its absence is a warning from verify(), not a refusal', async () => {
        const table = newTable('indexed');
        const previous = readFileSync(join(import.meta.dirname, 'fixtures/mysql-before-timestamps.sql'), 'utf8');
        await main.query(previous.replace('`idempotency_records`', `\`${table}\``));
        expect(await indexColumns(table)).toEqual([]);
        const pools = Array.from({ length: 3 }, () => createPool({ ...BASE, connectionLimit: 2 }));
        try {
          const added = await Promise.all(pools.flatMap((pool) => [1, 2].map(() => mysqlStore({ pool, table }).migrate())));
          // Each part was added by one of them (the others found it there, or lost the race to it).
          expect(added.flat().filter((what) => what === `index ${table}.in_flight`)).toHaveLength(1);
        } finally {
          await Promise.all(pools.map((pool) => pool.end()));
        }
        expect(await indexColumns(table)).toEqual(['state', 'lease_until']);
        const { lines, logger } = warnings();
        const store = mysqlStore({ pool: main, table, logger });
        await expect(store.verify()).resolves.toBeUndefined();
        expect(lines).toEqual([]);
        // Dropped: verify() resolves and warns, once per call; the statements still answer; migrate() adds it back.
        await main.query(`ALTER TABLE \`${table}\` DROP INDEX in_flight`);
        await expect(store.verify()).resolves.toBeUndefined();
        expect(lines).toEqual([
          `idemkit: mysql store: index in_flight of table ${table} is missing: listAbandoned (the completer) and endLeasesOf (startInstance) read the whole table without it; run \`await store.migrate()\` or \`idemkit migrate\` (it adds the index online)`,
        ]);
        expect(await store.listAbandoned()).toEqual([]);
        expect(await store.endLeasesOf('a'.repeat(16))).toBe(0);
        expect(await store.migrate()).toEqual([`index ${table}.in_flight`]);
        expect(await store.migrate()).toEqual([]);
        await store.verify();
        expect(lines).toHaveLength(1);
      });

      it("the store's listAbandoned and endLeasesOf statements read it, on an analyzed table of completed records", async () => {
        const table = newTable('planned');
        const store = mysqlStore({ pool: main, table });
        await store.migrate();
        const now = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)`;
        const connection = await main.getConnection();
        try {
          // 20,000 records, one in 200 in flight with its lease over: the completed ones are what the index leaves out.
          await connection.query('SET SESSION max_recursive_iterations = 100000').catch(() => {});
          await connection.query('SET SESSION cte_max_recursion_depth = 100000').catch(() => {});
          await connection.query(
            `INSERT INTO \`${table}\` (scope, idem_key, fingerprint, state, token, revision, attempt, lease_until, expires_at, status, headers, body)
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
             SELECT 's', CONCAT('c', i), 'fp', IF(i % 200 = 0, 'in_flight', 'completed'), MD5(i), 1, 1,
                    ${now} - 3600000 + i * 100, ${now} + 86400000 + i * 100, IF(i % 200 = 0, NULL, 201), IF(i % 200 = 0, NULL, '[]'), NULL FROM n`,
          );
        } finally {
          connection.release();
        }
        await main.query(`ANALYZE TABLE \`${table}\``);
        const sql = statements(table);
        const keyOf = async (text: string, values: unknown[]) => ((await main.query<RowDataPacket[]>(`EXPLAIN ${text}`, values))[0]).map((row) => row.key);
        expect(await keyOf(sql.listAbandoned(100), [])).toEqual(['in_flight']);
        expect(await keyOf(sql.endLeasesOf, ['a'.repeat(16)])).toEqual(['in_flight']);
        // …and they find what they should: the 100 in flight, oldest lease first.
        const listed = await store.listAbandoned(1000);
        expect(listed).toHaveLength(100);
        expect(listed[0]!.key).toBe('c200');
      });
    });

    it('refuses table names that are not plain identifiers, naming `table`', () => {
      for (const table of ['x; DROP TABLE y', 'a-b', '1abc', '', 'db.records', '`x`', 'a'.repeat(65), 'naïve']) {
        expect(() => mysqlStore({ pool: main, table })).toThrow(InvalidOptionError);
        expect(() => mysqlStore({ pool: main, table })).toThrow(/`table`/);
      }
      expect(() => mysqlSchema('x y')).toThrow(/`table`/);
      expect(() => mysqlStore({ pool: main, table: 'select' })).not.toThrow();
    });

    it('validates its other options eagerly, naming them', () => {
      expect(() => mysqlStore({} as never)).toThrow(/`pool`/);
      expect(() => mysqlStore({ pool: main, maxResponseBytes: -1 })).toThrow(/maxResponseBytes/);
      expect(() => mysqlStore({ pool: main, maxResponseBytes: 2 ** 31 })).toThrow(/maxResponseBytes/);
      expect(() => mysqlStore({ pool: main, statementTimeoutMs: 0 })).toThrow(/statementTimeoutMs/);
      expect(() => mysqlStore({ pool: main, statementTimeoutMs: 2 ** 31 })).toThrow(/statementTimeoutMs/);
    });
  });

  describe('records', () => {
    let store: ReturnType<typeof mysqlStore<Pool>>;
    let table: string;
    beforeAll(async () => {
      table = newTable('records');
      store = mysqlStore({ pool: main, table });
      await store.migrate();
    });

    it('keeps scopes and keys byte-exact: case, trailing spaces and accents are different records', async () => {
      const key = `k-${randomUUID()}`;
      const scope = `acct-${randomUUID()}`;
      const refs = [
        { scope, key },
        { scope: `${scope} `, key },
        { scope: scope.toUpperCase(), key },
        { scope, key: `${key} ` },
        { scope: `${scope}é`, key },
        { scope: `${scope}e\u0301`, key },
      ];
      const claims = await Promise.all(refs.map((r) => store.claim(r, 'fp', { leaseMs: 10_000, windowMs: 60_000 })));
      expect(claims.map((c) => c.kind)).toEqual(refs.map(() => 'acquired'));
    });

    it('refuses a scope that does not fit or is not well-formed, before touching the server', async () => {
      const opts = { leaseMs: 1000, windowMs: 5000 };
      for (const scope of ['x'.repeat(1025), 'a\uD800b', '\uDC00']) {
        const error = await store.claim({ scope, key: 'k' }, 'fp', opts).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(IdemkitError);
        expect((error as IdemkitError).code).toBe('ERR_IDEMKIT_INVALID_REF');
      }
      expect((await store.claim({ scope: '😀'.repeat(255), key: `k-${randomUUID()}` }, 'fp', opts)).kind).toBe('acquired');
    });

    it('reports a corrupt row as an error naming its scope and key, not a crash', async () => {
      const r = ref();
      const { token } = await acquire(store, r);
      await store.complete(r, token, ok());
      await main.execute(`UPDATE \`${table}\` SET headers = 'not json' WHERE scope = ? AND idem_key = ?`, [r.scope, r.key]);
      // One at a time: a second promise made up front could reject before anything awaits it.
      for (const attempt of [() => store.claim(r, 'fp', { leaseMs: 1000, windowMs: 5000 }), () => store.get(r)]) {
        const error = await attempt().catch((e: unknown) => e);
        expect(error).toBeInstanceOf(IdemkitError);
        expect((error as IdemkitError).code).toBe('ERR_IDEMKIT_CORRUPT_RECORD');
        expect((error as Error).message).toContain(JSON.stringify(r.key));
        expect((error as Error).message).toContain(JSON.stringify(r.scope));
        expect((error as Error).message).toMatch(/headers/);
      }

      // A state the store never writes (a server without strict mode stores '' for it): the
      // claim cannot classify the record, so the adapter fails closed and says why.
      const s = ref();
      await acquire(store, s);
      const connection = await main.getConnection();
      try {
        await connection.query("SET SESSION sql_mode = ''");
        await connection.execute(`UPDATE \`${table}\` SET state = 'bogus' WHERE scope = ? AND idem_key = ?`, [s.scope, s.key]);
      } finally {
        connection.destroy(); // its session mode must not go back to the pool
      }
      const errors: unknown[] = [];
      let ran = false;
      const handle = withIdempotency(
        async () => {
          ran = true;
          return new Response('ran');
        },
        { store, scope: () => s.scope, onError: (e) => errors.push(e) },
      );
      expect((await handle(post(s.key))).status).toBe(503);
      expect(ran).toBe(false);
      expect(errors).toHaveLength(1);
      expect((errors[0] as IdemkitError).message).toContain(JSON.stringify(s.key));
    });

    it('costs 2 statements for a new key, 1 for a replay, 1 for a completion', async () => {
      const spy = spyPool(main);
      const counted = mysqlStore({ pool: spy.pool, table });
      const opts = { leaseMs: 10_000, windowMs: 60_000 };
      const warm = ref();
      const warmToken = (await acquire(counted, warm)).token;
      spy.take();
      const r = ref();
      const trips = async (work: () => Promise<unknown>) => {
        await work();
        return spy.take().length;
      };
      let token = '';
      const figures = {
        newKey: await trips(async () => (token = (await acquire(counted, r)).token)),
        inFlight: await trips(() => counted.claim(r, 'fp', opts)),
        mismatch: await trips(() => counted.claim(r, 'other', opts)),
        // A lease of 0 ends now, so the take-over that follows needs no waiting.
        renew: await trips(() => counted.renew(r, token, 0)),
        takeover: await trips(async () => {
          const heir = await acquire(counted, r);
          expect(heir.takeover).toBe(true);
          token = heir.token;
        }),
        complete: await trips(() => counted.complete(r, token, ok())),
        replay: await trips(() => counted.claim(r, 'fp', opts)),
        release: await trips(() => counted.release(warm, warmToken)),
        // The record with its times (createdAt, updatedAt): one SELECT.
        get: await trips(async () => expect(typeof (await counted.get(r))?.createdAt).toBe('number')),
      };
      expect(figures).toEqual({ newKey: 2, inFlight: 1, mismatch: 1, renew: 1, takeover: 2, complete: 1, replay: 1, release: 1, get: 1 });

      const t = ref();
      const claim = await acquire(counted, t);
      spy.take();
      const tx = await counted.beginTransaction();
      await tx.complete(t, claim.token, ok());
      await tx.commit();
      expect(spy.take()).toEqual(['START TRANSACTION', expect.stringMatching(/^UPDATE/), 'COMMIT']);
    });
  });

  describe('concurrency', () => {
    let table: string;
    let pools: Pool[];
    let stores: IdempotencyStore[];
    beforeAll(async () => {
      table = newTable('race');
      await mysqlStore({ pool: main, table }).migrate();
      pools = Array.from({ length: 4 }, () => createPool({ ...BASE, connectionLimit: 10 }));
      stores = pools.map((pool) => mysqlStore({ pool, table }));
    });
    afterAll(async () => {
      await Promise.all(pools.map((pool) => pool.end()));
    });

    const race = (r: RecordRef, fp: string, o: { leaseMs: number; windowMs: number }) =>
      Promise.all(Array.from({ length: 200 }, (_, i) => stores[i % stores.length]!.claim(r, fp, o)));
    const winners = (claims: Claim[]) => claims.filter((c): c is Extract<Claim, { kind: 'acquired' }> => c.kind === 'acquired');

    it('gives exactly one winner among 200 claims across 4 pools: new key, take-over, and after the window', async () => {
      // Leases and windows outlast any race, however slow the machine: a lease ends only when the
      // test ends it (renew to 0 ms), and the window-over race is on a key whose window ended first.
      const live = { leaseMs: 60_000, windowMs: 120_000 };
      const r = ref();
      const fresh = await race(r, 'fp', live);
      expect(winners(fresh)).toHaveLength(1);
      expect(fresh.filter((c) => c.kind === 'in_flight')).toHaveLength(199);

      expect(await stores[0]!.renew(r, winners(fresh)[0]!.token, 0)).toBe(true);
      const takeover = await race(r, 'fp', live);
      const [heir] = winners(takeover);
      expect(winners(takeover)).toHaveLength(1);
      expect(heir).toMatchObject({ takeover: true });
      expect(takeover.filter((c) => c.kind === 'in_flight')).toHaveLength(199);
      await stores[0]!.complete(r, heir!.token, ok('heir'));

      const old = ref();
      const { token } = await acquire(stores[0]!, old, 60_000, 300);
      await stores[0]!.complete(old, token, ok('old'));
      await sleep(400); // past its window: sleeping longer only makes it more so
      const renewed = await race(old, 'fp-next', live);
      expect(winners(renewed)).toHaveLength(1);
      expect(winners(renewed)[0]).toMatchObject({ takeover: false });
      expect(renewed.filter((c) => c.kind === 'in_flight')).toHaveLength(199);
    });

    it('lets concurrent reapers delete each expired record exactly once, and never a live lease', async () => {
      const reapTable = newTable('reap');
      const reapers = pools.map((pool) => mysqlStore({ pool, table: reapTable }));
      await reapers[0]!.migrate();
      const store = reapers[0]!;
      const old = Array.from({ length: 60 }, () => ref());
      await Promise.all(
        old.map(async (r) => {
          const { token } = await acquire(store, r, 10_000, 300);
          await store.complete(r, token, ok());
        }),
      );
      const live = ref();
      await acquire(store, live);
      const pastWindowButLeased = ref();
      await acquire(store, pastWindowButLeased, 60_000, 300);
      await sleep(400);
      const counts = await Promise.all(
        reapers.map(async (reaper) => {
          let total = 0;
          for (;;) {
            const n = await reaper.reap(7);
            expect(n).toBeLessThanOrEqual(7);
            if (n === 0) return total;
            total += n;
          }
        }),
      );
      expect(counts.reduce((a, b) => a + b, 0)).toBe(60);
      expect(await count(main, `SELECT COUNT(*) AS n FROM \`${reapTable}\``)).toBe(2);
      expect((await store.get(live))?.state).toBe('in_flight');
      expect((await store.get(pastWindowButLeased))?.state).toBe('in_flight');
    });
  });

  describe('transactional mode', () => {
    let store: ReturnType<typeof mysqlStore<Pool>>;
    let effects: string;
    let txTable: string;
    beforeAll(async () => {
      const table = (txTable = newTable('tx'));
      effects = `${table}_effects`;
      store = mysqlStore({ pool: main, table });
      await store.migrate();
      await main.query(`CREATE TABLE \`${effects}\` (id VARCHAR(64) PRIMARY KEY, note VARCHAR(64)) ENGINE = InnoDB`);
    });
    const effectCount = (id: string) => count(main, `SELECT COUNT(*) AS n FROM \`${effects}\` WHERE id = '${id}'`);
    const insertEffect = (tx: PoolConnection, id: string) => tx.execute(`INSERT INTO \`${effects}\` (id) VALUES (?)`, [id]);

    it('commits the completion with the business write, or neither', async () => {
      const r = ref();
      const { token } = await acquire(store, r);
      const rolled = await store.beginTransaction();
      await insertEffect(rolled.tx, r.key);
      await rolled.complete(r, token, ok());
      await rolled.rollback();
      expect(await effectCount(r.key)).toBe(0);
      expect((await store.get(r))?.state).toBe('in_flight');

      const committed = await store.beginTransaction();
      await insertEffect(committed.tx, r.key);
      await committed.complete(r, token, ok());
      await committed.commit();
      expect(await effectCount(r.key)).toBe(1);
      expect((await store.get(r))?.state).toBe('completed');
    });

    it('fences the completion inside the transaction: a stale token rolls the business write back', async () => {
      const r = ref();
      const first = await acquire(store, r, 200);
      await sleep(250);
      const second = await acquire(store, r);
      expect(second.takeover).toBe(true);
      const late = await store.beginTransaction();
      await insertEffect(late.tx, r.key);
      await expect(late.complete(r, first.token, ok('late'))).rejects.toBeInstanceOf(LeaseLostError);
      await late.rollback();
      expect(await effectCount(r.key)).toBe(0);
      await store.complete(r, second.token, ok('winner'));
      const record = await store.get(r);
      expect(new TextDecoder().decode(record!.response!.body!)).toBe('winner');
    });

    it('makes a take-over that races an uncommitted completion wait for it, then replay it', async () => {
      const r = ref();
      const { token } = await acquire(store, r, 300);
      const tx = await store.beginTransaction();
      await insertEffect(tx.tx, r.key);
      await tx.complete(r, token, ok('committed'));
      await sleep(350); // the committed row now shows an expired lease
      let settled = false;
      const racing = store.claim(r, 'fp', { leaseMs: 10_000, windowMs: 60_000 }).finally(() => (settled = true));
      // The server shows its UPDATE waiting on the completion's row lock: a state, not a duration.
      // (InnoDB refreshes its information_schema tables only after 100 ms without a read, so the
      // polling is slower than that.)
      const waiting = async () =>
        (await count(main, `SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE '%${txTable}\`%'`)) > 0;
      for (let polls = 0; !(await waiting()); polls++) {
        if (polls === 200) throw new Error('the take-over never waited on the row lock');
        await sleep(150);
      }
      expect(settled).toBe(false);
      await tx.commit();
      const claim = await racing;
      expect(claim.kind).toBe('completed');
      expect(claim.kind === 'completed' && new TextDecoder().decode(claim.response.body!)).toBe('committed');
      expect(await effectCount(r.key)).toBe(1);
    });

    it('refuses a completion that would run after the transaction ended (a COMMIT in the handler)', async () => {
      const r = ref();
      const { token } = await acquire(store, r);
      const tx = await store.beginTransaction();
      await tx.tx.query('COMMIT');
      const error = await tx.complete(r, token, ok()).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'ERR_IDEMKIT_TRANSACTION_ENDED', message: expect.stringMatching(/after the transaction had ended/) });
      await tx.rollback();
    });

    it('runs a handler through withIdempotency with ctx.tx as the mysql2 connection', async () => {
      let executions = 0;
      const handle = withIdempotency(
        async (request, ctx) => {
          executions++;
          const key = request.headers.get('idempotency-key')!;
          await ctx!.tx.execute(`INSERT INTO \`${effects}\` (id, note) VALUES (?, 'paid')`, [key]);
          if (key.startsWith('fail')) throw new Error('card declined after the insert');
          return Response.json({ paid: true }, { status: 201 });
        },
        { store, transactional: true },
      );
      const key = `k-${randomUUID()}`;
      const [first, second] = [await handle(post(key)), await handle(post(key))];
      expect([first.status, second.status]).toEqual([201, 201]);
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(await effectCount(key)).toBe(1);

      const failing = `fail-${randomUUID()}`;
      expect((await handle(post(failing))).status).toBe(500);
      expect(await effectCount(failing)).toBe(0);
      expect(await store.get({ scope: '', key: failing })).toBeUndefined();
      expect((await handle(post(failing))).status).toBe(500); // released: the retry runs again
      expect(executions).toBe(3);
    });
  });

  describe('connection failures', () => {
    let table: string;
    beforeAll(async () => {
      table = newTable('faults');
      await mysqlStore({ pool: main, table }).migrate();
    });

    it('recognises its own write when the answer was lost with the connection', async () => {
      let lose = (sql: string) => sql.startsWith('INSERT');
      const spy = spyPool(main, {
        async onExecute(sql, run, connection) {
          const result = await run();
          if (!lose(sql)) return result;
          lose = () => false;
          connection.destroy();
          throw Object.assign(new Error('Connection lost: The server closed the connection.'), { fatal: true, code: 'PROTOCOL_CONNECTION_LOST' });
        },
      });
      const store = mysqlStore({ pool: spy.pool, table });
      const r = ref();
      const claim = await store.claim(r, 'fp', { leaseMs: 10_000, windowMs: 60_000 });
      expect(claim).toMatchObject({ kind: 'acquired', takeover: false });
      expect((await store.claim(r, 'fp', { leaseMs: 10_000, windowMs: 60_000 })).kind).toBe('in_flight');

      lose = (sql) => sql.startsWith('UPDATE') && sql.includes("state = 'completed'");
      await store.complete(r, (claim as { token: string }).token, ok('landed'));
      expect((await store.get(r))?.state).toBe('completed');
      await expect(store.complete(r, (claim as { token: string }).token, ok('again'))).rejects.toBeInstanceOf(LeaseLostError);
    });

    it('never writes through a pooled connection that was left inside a transaction', async () => {
      const pool = createPool({ ...BASE, connectionLimit: 1 });
      try {
        const leftOpen = await pool.getConnection();
        await leftOpen.beginTransaction();
        leftOpen.release();
        const store = mysqlStore({ pool, table });
        const r = ref();
        await expect(store.claim(r, 'fp', { leaseMs: 10_000, windowMs: 60_000 })).rejects.toBeInstanceOf(StoreUnavailableError);
        expect(await mysqlStore({ pool: main, table }).get(r)).toBeUndefined(); // rolled back with the connection
        expect((await store.claim(r, 'fp', { leaseMs: 10_000, windowMs: 60_000 })).kind).toBe('acquired');
      } finally {
        await pool.end();
      }
    });
  });

  describe('outages through the web adapter', () => {
    let table: string;
    beforeAll(async () => {
      table = newTable('outage');
      await mysqlStore({ pool: main, table }).migrate();
    });

    /**
     * A protected endpoint that counts how often its handler really ran, and what `onError` was
     * told. No assertion here measures elapsed time (a loaded machine stretches any duration): an
     * answer "at once" is one that came from the store's own error while every deadline was set
     * far past the test's timeout, and an answer "within storeTimeoutMs" one that came from that
     * deadline (its message says so); a wait is a barrier on a state, never a guessed duration.
     */
    const app = (store: IdempotencyStore, options: Partial<IdempotencyOptions<Request>> = {}) => {
      const state = { executions: 0, errors: [] as unknown[] };
      const handle = withIdempotency(
        async () => {
          state.executions++;
          return Response.json({ charged: true }, { status: 201 });
        },
        { store, storeTimeoutMs: 300, onError: (error) => void state.errors.push(error), ...options },
      );
      /** Sends one request; `errors` is what onError was told while it was answered. */
      const send = async (request: Request) => {
        const told = state.errors.length;
        const response = await handle(request);
        return { response, errors: state.errors.slice(told) };
      };
      return { handle, send, state };
    };
    /** Far past the test's own timeout: an answer cannot have come from a deadline this long. */
    const NEVER = 600_000;
    const TIMED_OUT = /did not answer within \d+ ms \(option `storeTimeoutMs`\)/;
    /**
     * A 503 store-unavailable, and what produced it: `'deadline'` the engine's storeTimeoutMs, or
     * an error of the store's own, whose `code` (mysql2's, or the store's) is returned.
     */
    const expectUnavailable = async ({ response, errors }: { response: Response; errors: readonly unknown[] }, via: 'store' | 'deadline') => {
      expect(response.status).toBe(503);
      expect(response.headers.get('content-type')).toContain('application/problem+json');
      expect((await response.json()).type).toBe('urn:idemkit:problem:store-unavailable');
      expect(errors.length).toBeGreaterThan(0);
      const first = errors[0] as Error & { code?: string };
      if (via === 'deadline') {
        expect(first).toBeInstanceOf(StoreUnavailableError);
        expect(first.message).toMatch(TIMED_OUT);
      } else {
        expect(first.message).not.toMatch(TIMED_OUT);
        expect(first.message).not.toMatch(/statementTimeoutMs/);
      }
      return first.code;
    };

    it('answers 503 at once while nothing listens on the port, and recovers once the server is reachable', async () => {
      const port = await freePort();
      const pool = createPool({ ...BASE, port, connectionLimit: 2, connectTimeout: 1_000 });
      const { handle, send, state } = app(mysqlStore({ pool, table, statementTimeoutMs: NEVER }), { storeTimeoutMs: NEVER });
      const key = `k-${randomUUID()}`;
      try {
        for (let i = 0; i < 3; i++) expect(await expectUnavailable(await send(post(key)), 'store')).toBe('ECONNREFUSED');
        expect(state.executions).toBe(0);
        const forwarder = await startTcpProxy(MARIADB.port, { listenPort: port });
        try {
          expect((await handle(post(key))).status).toBe(201);
          expect((await handle(post(key))).headers.get('idempotent-replayed')).toBe('true');
          expect(state.executions).toBe(1);
        } finally {
          await forwarder.close();
        }
      } finally {
        await pool.end();
      }
    });

    it('answers 503 at once when its connection is cut mid-statement, and recovers', async () => {
      const proxy = await startTcpProxy(MARIADB.port);
      const pool = createPool({ ...BASE, port: proxy.port, connectionLimit: 2 });
      const { handle, send, state } = app(mysqlStore({ pool, table, statementTimeoutMs: NEVER }), { storeTimeoutMs: NEVER });
      try {
        expect((await handle(post(`k-${randomUUID()}`))).status).toBe(201); // a warm pool
        proxy.pause();
        const key = `k-${randomUUID()}`;
        const pending = send(post(key));
        await sleep(100); // most likely the statement is on its way; if not, it finds the proxy refusing: 503 at once either way
        proxy.cut(); // the frozen statement's connection dies; the retry finds the proxy refusing
        // The connection's loss, not a deadline (none can end before the test's timeout).
        expect(await expectUnavailable(await pending, 'store')).toMatch(/^(PROTOCOL_CONNECTION_LOST|ECONNRESET|ECONNREFUSED|EPIPE)$/);
        expect(state.executions).toBe(1);
        proxy.resume();
        expect((await handle(post(key))).status).toBe(201);
        expect(state.executions).toBe(2);
      } finally {
        await pool.end();
        await proxy.close();
      }
    });

    it('keeps the record when the connection is cut between claim and completion', async () => {
      const proxy = await startTcpProxy(MARIADB.port);
      const pool = createPool({ ...BASE, port: proxy.port, connectionLimit: 2 });
      const store = mysqlStore({ pool, table });
      let executions = 0;
      const handle = withIdempotency(
        async () => {
          executions++;
          proxy.cut(); // every pooled connection dies while the handler runs
          return Response.json({ charged: true }, { status: 201 });
        },
        { store, storeTimeoutMs: 2_000 },
      );
      try {
        const key = `k-${randomUUID()}`;
        expect((await handle(post(key))).status).toBe(201);
        const replay = await handle(post(key));
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(executions).toBe(1);
      } finally {
        await pool.end();
        await proxy.close();
      }
    });

    it('answers 503 within storeTimeoutMs while the connection is frozen, never runs the handler, recovers on resume', async () => {
      const proxy = await startTcpProxy(MARIADB.port);
      const pool = createPool({ ...BASE, port: proxy.port, connectionLimit: 2 });
      const store = mysqlStore({ pool, table, statementTimeoutMs: 1_000 });
      // Counts the store's claims still running, to know when the store has given up on them all.
      let running = 0;
      const counted: IdempotencyStore = {
        ...store,
        claim: (...args) => {
          running++;
          return store.claim(...args).finally(() => running--);
        },
      };
      const { handle, send, state } = app(counted);
      try {
        expect((await handle(post(`k-${randomUUID()}`))).status).toBe(201);
        proxy.pause();
        const key = `k-${randomUUID()}`;
        // The first claim freezes on a pooled connection, so the deadline answers; the others may
        // also find the proxy refusing new connections, and then the store answers first.
        await expectUnavailable(await send(post(key)), 'deadline');
        for (let i = 0; i < 2; i++) {
          const { response } = await send(post(key));
          expect(response.status).toBe(503);
        }
        expect(state.executions).toBe(1);
        // Resume only once the store has given up on every frozen claim (statementTimeoutMs
        // destroys their connections): resumed, they would land after the adapter gave up and
        // hold the key until the lease ends.
        await until(async () => running === 0, 'the store to give up on the frozen claims');
        proxy.resume();
        expect((await handle(post(key))).status).toBe(201);
        expect(state.executions).toBe(2);
      } finally {
        await pool.end();
        await proxy.close();
      }
    });

    it('destroys a connection frozen for good, so the pool recovers without it', async () => {
      const forwarder = await startTcpProxy(MARIADB.port);
      const pool = createPool({ ...BASE, port: forwarder.port, connectionLimit: 1 });
      const spy = spyPool(pool);
      const store = mysqlStore({ pool: spy.pool, table, statementTimeoutMs: 500 });
      const { handle, send, state } = app(store);
      const r = ref();
      try {
        await acquire(store, r); // the pool's only connection is now open
        forwarder.freezeOpen(); // …and silently dead, while new connections still work
        // storeTimeoutMs (300 ms) answers before the store's own statementTimeoutMs (500 ms)…
        await expectUnavailable(await send(post(`k-${randomUUID()}`)), 'deadline');
        // …which then destroys the frozen connection; it never comes back.
        await until(async () => spy.destroyed() > 0, 'the store to destroy the frozen connection');
        expect(spy.destroyed()).toBe(1);
        expect((await handle(post(`k-${randomUUID()}`))).status).toBe(201);
        expect(state.executions).toBe(1);
      } finally {
        await pool.end();
        await forwarder.close();
      }
    });

    it('gives up on a server that accepts but never answers within connectTimeout', async () => {
      const silent = await startSilentServer();
      const pool = createPool({ ...BASE, port: silent.port, connectionLimit: 1, connectTimeout: 500 });
      const { send, state } = app(mysqlStore({ pool, table, statementTimeoutMs: NEVER }), { storeTimeoutMs: NEVER });
      try {
        // Twice on a one-connection pool: the half-open connection must not stay in it (the
        // second request would wait for it until the test times out). Only mysql2's
        // connectTimeout can answer: every other deadline is past the test's timeout.
        for (let i = 0; i < 2; i++) expect(await expectUnavailable(await send(post(`k-${randomUUID()}`)), 'store')).toBe('ETIMEDOUT');
        expect(state.executions).toBe(0);
      } finally {
        await pool.end();
        await silent.close();
      }
    });
  });
});

function post(key: string): Request {
  return new Request('http://local/charges', {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body: '{"amount":100}',
  });
}
