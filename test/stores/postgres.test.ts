import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { IdemkitError, InvalidOptionError, LeaseLostError, StoreSchemaMissingError, StoreUnavailableError } from '../../src/core/errors.js';
import type { RecordRef, StoredResponse } from '../../src/core/store.js';
import { withIdempotency } from '../../src/http/web.js';
import type { PostgresPool } from '../../src/drivers/postgres.js';
import type { PostgresStore } from '../../src/stores/postgres/index.js';
import { postgresSchemaSql, postgresStore } from '../../src/stores/postgres/index.js';
import { postgresStatements, resolveNames } from '../../src/stores/postgres/sql.js';
import { POSTGRES, requireService } from '../support/services.js';
import { describeStoreContract } from './contract.js';
import { countingPool, dropTable, newPool, sleep, uniqueTable, until } from './postgres-support.js';

const up = await requireService(POSTGRES);

const ok: StoredResponse = { status: 201, headers: [['content-type', 'text/plain']], body: new TextEncoder().encode('done'), bodyOmitted: false };
const ref = (): RecordRef => ({ scope: `s-${randomUUID()}`, key: `k-${randomUUID()}` });
const opts = { leaseMs: 10_000, windowMs: 60_000 };

describe.skipIf(!up)('postgres store', () => {
  describeStoreContract('postgres', async () => {
    const pool = newPool({ max: 10 });
    const table = uniqueTable();
    const store = postgresStore({ pool, table, maxResponseBytes: 64 * 1024 });
    await store.migrate();
    return {
      store,
      advance: sleep,
      close: async () => {
        await dropTable(pool, table);
        await pool.end();
      },
    };
  });

  describe('postgresStore', () => {
    let pool: pg.Pool;
    let table: string;
    let store: PostgresStore<pg.PoolClient>;
    const pools: pg.Pool[] = [];
    const morePools = (n: number) => {
      const created = Array.from({ length: n }, () => newPool({ max: 4 }));
      pools.push(...created);
      return created;
    };
    const acquire = async (r: RecordRef, leaseMs = opts.leaseMs) => {
      const claim = await store.claim(r, 'fp', { ...opts, leaseMs });
      if (claim.kind !== 'acquired') throw new Error(`expected acquired, got ${claim.kind}`);
      return claim;
    };
    /** Ends the lease on the server's clock, without waiting for it. */
    const expireLease = (r: RecordRef) =>
      pool.query(`UPDATE "${table}" SET lease_until = now() - interval '1 second' WHERE scope = $1 AND key = $2`, [r.scope, r.key]);

    beforeAll(async () => {
      pool = newPool({ max: 8 });
      table = uniqueTable();
      store = postgresStore({ pool, table });
      await store.migrate();
      await pool.query(`CREATE TABLE "${table}_effects" (key text NOT NULL, note text)`);
    });
    afterAll(async () => {
      await Promise.all(pools.map((p) => p.end()));
      if (!pool) return;
      await pool.query(`DROP TABLE IF EXISTS "${table}_effects"`);
      await dropTable(pool, table);
      await pool.end();
    });
    const effects = async (key: string) =>
      Number((await pool.query(`SELECT count(*) AS n FROM "${table}_effects" WHERE key = $1`, [key])).rows[0].n);

    describe('schema', () => {
      // After changing the schema, regenerate the file:
      // node --import tsx -e "import('./src/stores/postgres/sql.ts').then((m) => process.stdout.write(m.postgresSchemaSql()))" > sql/postgres.sql
      it('ships sql/postgres.sql as exactly the text migrate() runs', async () => {
        const file = readFileSync(new URL('../../sql/postgres.sql', import.meta.url), 'utf8');
        expect(file).toBe(postgresSchemaSql());
        const ran: string[] = [];
        const recorder: PostgresPool = {
          async query(text) {
            ran.push(text);
            return { rows: [], rowCount: 0 };
          },
          connect: () => Promise.reject(new Error('unused')),
        };
        await postgresStore({ pool: recorder }).migrate();
        // A look at what is there (to report what it adds), then the file's text, as one message.
        expect(ran).toHaveLength(2);
        expect(ran[1]).toBe(file);
      });

      it('migrates twice, and from several pools at once, onto a fresh table', async () => {
        const fresh = uniqueTable();
        const stores = morePools(4).map((p) => postgresStore({ pool: p, table: fresh }));
        try {
          await Promise.all(stores.map((s) => s.migrate()));
          await Promise.all(stores.map((s) => s.migrate()));
          await stores[0]!.migrate();
          const objects = await pool.query(
            `SELECT (SELECT count(*) FROM pg_class WHERE relname IN ($1, $2, $4)) AS relations,
                    (SELECT count(*) FROM pg_proc WHERE proname = $3) AS functions`,
            [fresh, `${fresh}_expires_at`, `${fresh}_claim`, `${fresh}_in_flight`],
          );
          expect(objects.rows[0]).toEqual({ relations: '3', functions: '1' });
          const r = ref();
          expect((await stores[1]!.claim(r, 'fp', opts)).kind).toBe('acquired');
          expect((await stores[2]!.claim(r, 'fp', opts)).kind).toBe('in_flight');
        } finally {
          await dropTable(pool, fresh);
        }
      });

      it('does not lock the table when migrating an existing schema (claims go on behind a long transaction)', async () => {
        const long = await pool.connect();
        try {
          await long.query('BEGIN');
          await long.query(`LOCK TABLE "${table}" IN ROW EXCLUSIVE MODE`);
          // Blocked is a state the server shows (a backend waiting on a lock of this table), not a
          // guess at a duration: whichever comes first, the migration's end or that state, decides.
          let settled = false;
          const migrating = store.migrate().then(() => 'migrated' as const);
          void migrating.finally(() => (settled = true)).catch(() => {});
          const waitingOnLock = async () => {
            const { rows } = await pool.query(
              `SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND query LIKE $1`,
              [`%${table}%`],
            );
            return rows[0].n !== '0';
          };
          const blocked = (async () => {
            while (!settled) {
              if (await waitingOnLock()) return 'blocked' as const;
              await sleep(20);
            }
            return 'migrated' as const;
          })();
          expect(await Promise.race([migrating, blocked])).toBe('migrated');
        } finally {
          await long.query('ROLLBACK');
          long.release();
        }
      });

      it('upgrades a table of the previous schema in place: old rows stay readable with unknown times, new ones are stamped', async () => {
        const old = uniqueTable();
        // The previous release's sql/postgres.sql, table, index and claim function, on this table.
        const previous = readFileSync(new URL('./fixtures/postgres-before-timestamps.sql', import.meta.url), 'utf8').replaceAll('idempotency_records', old);
        const client = await pool.connect();
        try {
          await client.query(`BEGIN; ${previous}; COMMIT`);
        } finally {
          client.release();
        }
        try {
          const upgraded = postgresStore({ pool, table: old });
          // Written by the previous version: a completed record, and an in-flight one whose lease ended.
          await pool.query(
            `INSERT INTO "${old}" (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, status, headers, body)
             VALUES ('t', 'done', 'fp', 'completed', '', 1, now() - interval '1 minute', now() + interval '1 hour', 201, '[]', 'x'),
                    ('t', 'running', 'fp', 'in_flight', $1, 1, now() - interval '1 minute', now() + interval '1 hour', NULL, NULL, NULL)`,
            ['a'.repeat(32)],
          );
          await expect(upgraded.verify()).rejects.toMatchObject({
            missing: [`column public.${old}.created_at`, `column public.${old}.updated_at`, `column renewed_ms_ago of function public.${old}_claim`],
          });
          expect(await upgraded.migrate()).toEqual([`column public.${old}.created_at`, `column public.${old}.updated_at`, `index public.${old}_in_flight`]);
          expect(await upgraded.migrate()).toEqual([]);
          await expect(upgraded.verify()).resolves.toBeUndefined();
          // The old rows replay and show unknown times, not 1970; --older-than judges them by their lease.
          expect(await upgraded.claim({ scope: 't', key: 'done' }, 'fp', opts)).toMatchObject({ kind: 'completed', response: { status: 201 } });
          expect(await upgraded.admin.inspect({ scope: 't', key: 'done' })).toMatchObject({ state: 'completed', createdAt: null, updatedAt: null });
      // get() leaves them undefined (never 0, never 1970); so does listAbandoned for the old one in flight.
      const oldDone = await upgraded.get({ scope: 't', key: 'done' });
      expect(oldDone).toMatchObject({ state: 'completed' });
      expect(oldDone!.createdAt).toBeUndefined();
      expect(oldDone!.updatedAt).toBeUndefined();
      const abandoned = (await upgraded.listAbandoned(1000)).find((r) => r.scope === 't' && r.key === 'running');
      expect(abandoned).toMatchObject({ state: 'in_flight', createdAt: undefined, updatedAt: undefined });
          expect((await upgraded.admin.list({ scope: 't', olderThanMs: 30_000 })).map((r) => r.key).sort()).toEqual(['done', 'running']);
          // A take-over of an old row is a change; its creation stays unknown.
          expect(await upgraded.claim({ scope: 't', key: 'running' }, 'fp', opts)).toMatchObject({ kind: 'acquired', takeover: true });
          const taken = await upgraded.admin.inspect({ scope: 't', key: 'running' });
          expect(taken).toMatchObject({ attempt: 2, createdAt: null });
          expect(taken!.updatedAt).toBeGreaterThan(0);
      const takenGet = await upgraded.get({ scope: 't', key: 'running' });
      expect(takenGet!.createdAt).toBeUndefined();
      expect(takenGet!.updatedAt).toBe(taken!.updatedAt);
          // New records get both, on the server's clock.
          expect((await upgraded.claim({ scope: 't', key: 'new' }, 'fp', opts)).kind).toBe('acquired');
          const fresh = await upgraded.admin.inspect({ scope: 't', key: 'new' });
          expect(fresh!.createdAt).toBe(fresh!.updatedAt);
          expect(fresh!.createdAt!).toBeLessThanOrEqual(fresh!.now);
          expect(fresh!.createdAt!).toBeGreaterThan(fresh!.now - 60_000);
      expect(await upgraded.get({ scope: 't', key: 'new' })).toMatchObject({ createdAt: fresh!.createdAt, updatedAt: fresh!.updatedAt });
        } finally {
          await dropTable(pool, old);
        }
      });

      it("replaces the previous release's claim function, which returns a column fewer; that release's claims keep working on this one", async () => {
        const old = uniqueTable();
        // The previous release's sql/postgres.sql (its claim function answers no renewed_ms_ago).
        const previous = readFileSync(new URL('./fixtures/postgres-before-liveness.sql', import.meta.url), 'utf8').replaceAll('idempotency_records', old);
        const client = await pool.connect();
        try {
          await client.query(`BEGIN; ${previous}; COMMIT`);
        } finally {
          client.release();
        }
        // That release's claim statement, as its instances send it during a rolling upgrade.
        const oldClaim = (key: string) =>
          pool.query(
            `SELECT outcome, retry_after_ms, attempt, recovery_point, recovery_data, status, headers, body, body_omitted
               FROM "public"."${old}_claim"($1, $2, $3, $4, $5, $6)`,
            ['t', key, 'fp', randomUUID().replaceAll('-', ''), 10_000, 60_000],
          );
        try {
          const upgraded = postgresStore({ pool, table: old });
          expect((await oldClaim('held')).rows[0]).toMatchObject({ outcome: 'acquired' });
          const missing = [`column renewed_ms_ago of function public.${old}_claim`];
          await expect(upgraded.verify()).rejects.toMatchObject({ missing });
          // Unverified, a claim of this version fails as a schema to migrate, not as an outage.
          const refused = await upgraded.claim({ scope: 't', key: 'held' }, 'fp', opts).then(() => undefined, (e: unknown) => e);
          expect(refused).toBeInstanceOf(StoreSchemaMissingError);
          expect((refused as StoreSchemaMissingError).missing).toEqual(missing);
          // No column to add (the in-flight index, which that release lacked, is): the function is replaced, once.
          expect(await upgraded.migrate()).toEqual([`index public.${old}_in_flight`]);
          expect(await upgraded.migrate()).toEqual([]);
          await expect(upgraded.verify()).resolves.toBeUndefined();
          const functions = await pool.query(`SELECT count(*) AS n FROM pg_proc WHERE proname = $1`, [`${old}_claim`]);
          expect(functions.rows[0]).toEqual({ n: '1' });
          // The record claimed through the old function is in flight, with its age; the old statement still runs.
          const inFlight = await upgraded.claim({ scope: 't', key: 'held' }, 'fp', opts);
          expect(inFlight).toMatchObject({ kind: 'in_flight' });
          expect(inFlight.kind === 'in_flight' && typeof inFlight.renewedMsAgo).toBe('number');
          expect((await oldClaim('held')).rows[0]).toMatchObject({ outcome: 'in_flight' });
          expect((await oldClaim('other')).rows[0]).toMatchObject({ outcome: 'acquired' });
        } finally {
          await dropTable(pool, old);
        }
      });

      describe('the in-flight index (listAbandoned, endLeasesOf)', () => {
        const warnings = () => {
          const lines: string[] = [];
          return { lines, logger: { warn: (message: string) => lines.push(message), error: (message: string) => lines.push(`error: ${message}`) } };
        };
        const definition = async (name: string) =>
          (await pool.query(`SELECT pg_get_indexdef(to_regclass($1)) AS d, (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)) AS valid`, [`"public"."${name}"`])).rows[0] as { d: string | null; valid: boolean | null };

        it('is added to a table of the previous release once, by several pools migrating at once; a missing or invalid one is a warning from verify(), not a refusal', async () => {
          const old = uniqueTable();
          const previous = readFileSync(new URL('./fixtures/postgres-before-liveness.sql', import.meta.url), 'utf8').replaceAll('idempotency_records', old);
          const client = await pool.connect();
          try {
            await client.query(`BEGIN; ${previous}; COMMIT`);
          } finally {
            client.release();
          }
          try {
            expect((await definition(`${old}_in_flight`)).d).toBeNull();
            const added = await Promise.all(morePools(3).flatMap((p) => [1, 2].map(() => postgresStore({ pool: p, table: old }).migrate())));
            // The look before each migration may see it missing in several; the index is made once.
            expect(added.flat().every((what) => what === `index public.${old}_in_flight`)).toBe(true);
            expect(await definition(`${old}_in_flight`)).toEqual({
              d: `CREATE INDEX ${old}_in_flight ON public.${old} USING btree (lease_until) WHERE (state = 'in_flight'::text)`,
              valid: true,
            });
            const { lines, logger } = warnings();
            const upgraded = postgresStore({ pool, table: old, logger });
            await expect(upgraded.verify()).resolves.toBeUndefined();
            expect(lines).toEqual([]);
            // Dropped: verify() resolves and warns, once per call; the statements still answer.
            await pool.query(`DROP INDEX "public"."${old}_in_flight"`);
            await expect(upgraded.verify()).resolves.toBeUndefined();
            expect(lines).toEqual([
              `idemkit: postgres store: index public.${old}_in_flight is missing: listAbandoned (the completer) and endLeasesOf (startInstance) read the whole table without it; run \`await store.migrate()\` or \`idemkit migrate\`, or on a large table create it without blocking writes (docs/stores/postgres.md, "Setup")`,
            ]);
            expect(await upgraded.listAbandoned()).toEqual([]);
            expect(await upgraded.endLeasesOf('a'.repeat(16))).toBe(0);
            // A CREATE INDEX CONCURRENTLY that failed leaves an invalid index of that name: named as
            // such, and left to the operator (it may be a build still running).
            await pool.query(
              `INSERT INTO "${old}" (scope, key, fingerprint, state, token, attempt, lease_until, expires_at)
               VALUES ('t', 'a', 'fp', 'in_flight', $1, 1, now(), now() + interval '1 hour'), ('t', 'b', 'fp', 'in_flight', $1, 1, now(), now() + interval '1 hour')`,
              ['b'.repeat(32)],
            );
            await expect(pool.query(`CREATE UNIQUE INDEX CONCURRENTLY "${old}_in_flight" ON "public"."${old}" (token) WHERE state = 'in_flight'`)).rejects.toThrow(/could not create unique index/);
            expect((await definition(`${old}_in_flight`)).valid).toBe(false);
            await expect(upgraded.verify()).resolves.toBeUndefined();
            expect(lines[1]).toMatch(new RegExp(`^idemkit: postgres store: index public\\.${old}_in_flight is not valid \\(a CREATE INDEX CONCURRENTLY that failed, or is still running; once none runs, drop it and migrate again\\): `));
            expect(await upgraded.migrate()).toEqual([]);
            await pool.query(`DROP INDEX "public"."${old}_in_flight"`);
            expect(await upgraded.migrate()).toEqual([`index public.${old}_in_flight`]);
            await upgraded.verify();
            expect(lines).toHaveLength(2);
          } finally {
            await dropTable(pool, old);
          }
        });

        it("the store's listAbandoned and endLeasesOf statements read it, on an analyzed table of completed records", async () => {
          const planned = uniqueTable();
          const plannedStore = postgresStore({ pool, table: planned });
          await plannedStore.migrate();
          try {
            // 20,000 records, one in 200 in flight with its lease over: the completed ones are what the index leaves out.
            await pool.query(
              `INSERT INTO "${planned}" (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, status, headers, body)
               SELECT 's', 'c' || i, 'fp', CASE WHEN i % 200 = 0 THEN 'in_flight' ELSE 'completed' END, md5(i::text), 1,
                      now() - interval '1 hour' + i * interval '100 ms', now() + interval '1 day' + i * interval '100 ms',
                      CASE WHEN i % 200 = 0 THEN NULL ELSE 201 END, CASE WHEN i % 200 = 0 THEN NULL ELSE '[]'::jsonb END, NULL
                 FROM generate_series(1, 20000) AS i`,
            );
            await pool.query(`ANALYZE "${planned}"`);
            const sql = postgresStatements(resolveNames({ table: planned }));
            const indexesOf = async (text: string, values: unknown[]) => {
              const { rows } = await pool.query(`EXPLAIN (FORMAT JSON) ${text}`, values);
              const names: string[] = [];
              const walk = (node: { 'Index Name'?: string; Plans?: unknown[] }) => {
                if (node['Index Name'] !== undefined) names.push(node['Index Name']);
                for (const child of node.Plans ?? []) walk(child as typeof node);
              };
              walk((rows[0]['QUERY PLAN'] as Array<{ Plan: Parameters<typeof walk>[0] }>)[0]!.Plan);
              return names;
            };
            expect(await indexesOf(sql.listAbandoned, [100])).toEqual([`${planned}_in_flight`]);
            expect(await indexesOf(sql.endLeasesOf, ['a'.repeat(16)])).toEqual([`${planned}_in_flight`]);
            // …and they find what they should: the 100 in flight, oldest lease first.
            const listed = await plannedStore.listAbandoned(1000);
            expect(listed).toHaveLength(100);
            expect(listed[0]!.key).toBe('c200');
          } finally {
            await dropTable(pool, planned);
          }
        });
      });

      it('answers an unknown age for an in-flight row an earlier idemkit wrote (no updated_at)', async () => {
        const r = ref();
        await pool.query(
          `INSERT INTO "${table}" (scope, key, fingerprint, state, token, attempt, lease_until, expires_at)
           VALUES ($1, $2, 'fp', 'in_flight', $3, 1, now() + interval '1 minute', now() + interval '1 hour')`,
          [r.scope, r.key, 'b'.repeat(32)],
        );
        const claim = await store.claim(r, 'fp', opts);
        expect(claim).toMatchObject({ kind: 'in_flight' });
        expect(claim.kind === 'in_flight' && claim.renewedMsAgo).toBeUndefined();
      });

      it('points at migrate() when the schema is missing', async () => {
        const bare = postgresStore({ pool, table: uniqueTable() });
        const error = await bare.claim(ref(), 'fp', opts).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(StoreSchemaMissingError);
        expect(error).not.toBeInstanceOf(StoreUnavailableError);
        expect((error as Error).message).toMatch(/migrate\(\)/);
      });
    });

    describe('options', () => {
      it.each([
        ['table', 'x; DROP TABLE y'],
        ['table', 'Records'],
        ['table', 'idem"x'],
        ['table', ''],
        ['table', '1abc'],
        ['table', 'a'.repeat(53)],
        ['table', 42],
        ['schema', 'public.x'],
        ['schema', 'a b'],
        ['schema', 'a'.repeat(64)],
      ])('refuses %s = %j, naming the option', (option, value) => {
        const make = () => postgresStore({ pool, [option]: value } as never);
        expect(make).toThrow(InvalidOptionError);
        expect(make).toThrow(new RegExp(`\`${option}\``));
      });

      it('refuses the same names when generating the schema SQL', () => {
        expect(() => postgresSchemaSql({ table: 'x; DROP TABLE y' })).toThrow(/`table`/);
        expect(() => postgresSchemaSql({ schema: 'Public' })).toThrow(/`schema`/);
        expect(postgresSchemaSql({ schema: 'billing', table: 'idem' })).toContain('CREATE TABLE IF NOT EXISTS "billing"."idem"');
      });

      it('accepts plain identifiers up to the limits', () => {
        expect(postgresStore({ pool, table: 'a'.repeat(52), schema: 'b'.repeat(63) }).name).toBe('postgres');
      });

      it('refuses a missing pool and a bad maxResponseBytes', () => {
        expect(() => postgresStore({} as never)).toThrow(/`pool`/);
        expect(() => postgresStore({ pool: { query: () => {} } as never })).toThrow(/`pool`/);
        expect(() => postgresStore({ pool, maxResponseBytes: -1 })).toThrow(/maxResponseBytes/);
        expect(() => postgresStore({ pool, maxResponseBytes: 2 ** 30 })).toThrow(/maxResponseBytes/);
      });
    });

    describe('claims', () => {
      // Found by the model-based test's probe of odd refs (test/stores/model): PostgreSQL text
      // cannot hold NUL, and the server's refusal came back as StoreUnavailableError, so a scope
      // with NUL made every request a 503, or ran it unprotected under failOpen.
      it('refuses NUL in a scope or key as the request’s problem (InvalidRecordRefError), not as the store being down', async () => {
        const token = '0'.repeat(32);
        for (const [field, bad] of [
          ['scope', { scope: `tenant\u0000${randomUUID()}`, key: 'k' }],
          ['key', { scope: 's', key: `k\u0000${randomUUID()}` }],
        ] as const) {
          for (const operation of [
            () => store.claim(bad, 'fp', opts),
            () => store.renew(bad, token, 0),
            () => store.checkpoint(bad, token, 'x'),
            () => store.complete(bad, token, ok),
            () => store.release(bad, token),
            () => store.get(bad),
            () => store.admin.inspect(bad),
            () => store.admin.purge(bad),
          ]) {
            await expect(operation()).rejects.toMatchObject({ code: 'ERR_IDEMKIT_INVALID_REF', field, message: expect.stringMatching(/NUL/) });
          }
        }
        let ran = 0;
        const handle = withIdempotency(
          async () => {
            ran++;
            return new Response('charged', { status: 201 });
          },
          { store, failOpen: true, scope: (request) => request.headers.get('x-tenant')!.replace('%00', '\u0000') },
        );
        const response = await handle(
          new Request('http://local/charges', { method: 'POST', headers: { 'idempotency-key': `k-${randomUUID()}`, 'x-tenant': 'a%00b' }, body: 'x' }),
        );
        // A 400 naming the scope, and the handler never ran unprotected.
        expect(response.status).toBe(400);
        expect(ran).toBe(0);
      });

      it('gives exactly one winner among 200 concurrent claims from 4 pools', async () => {
        const r = ref();
        const stores = morePools(4).map((p) => postgresStore({ pool: p, table }));
        const claims = await Promise.all(Array.from({ length: 200 }, (_, i) => stores[i % 4]!.claim(r, 'fp', opts)));
        expect(claims.filter((c) => c.kind === 'acquired')).toHaveLength(1);
        expect(claims.filter((c) => c.kind === 'in_flight')).toHaveLength(199);
      });

      it('gives exactly one take-over among 200 concurrent claims of an expired lease from 4 pools', async () => {
        const r = ref();
        const first = await acquire(r);
        await store.checkpoint(r, first.token, 'charged', { id: 7 });
        await expireLease(r);
        const stores = morePools(4).map((p) => postgresStore({ pool: p, table }));
        const claims = await Promise.all(Array.from({ length: 200 }, (_, i) => stores[i % 4]!.claim(r, 'fp', opts)));
        const won = claims.filter((c) => c.kind === 'acquired');
        expect(won).toEqual([expect.objectContaining({ takeover: true, resumeFrom: 'charged', recoveryData: { id: 7 } })]);
        expect(claims.filter((c) => c.kind === 'in_flight')).toHaveLength(199);
      });

      it('decides leases on the server clock, not the app clock', async () => {
        const r = ref();
        const serverNow = async () => Number((await pool.query('SELECT floor(extract(epoch FROM clock_timestamp()) * 1000) AS ms')).rows[0].ms);
        const before = await serverNow();
        await acquire(r);
        const after = await serverNow();
        const spy = vi.spyOn(Date, 'now').mockReturnValue(Date.now() + 3_600_000);
        try {
          expect((await store.claim(r, 'fp', opts)).kind).toBe('in_flight');
        } finally {
          spy.mockRestore();
        }
        const record = await store.get(r);
        // The lease on record came from the server's clock, read between the two readings around
        // the claim (1 ms for rounding), however long they took.
        expect(record!.leaseUntil).toBeGreaterThanOrEqual(before + opts.leaseMs - 1);
        expect(record!.leaseUntil).toBeLessThanOrEqual(after + opts.leaseMs + 1);
      });

      it('answers a replay, an in-flight claim and a mismatch without writing or locking the row', async () => {
        const r = ref();
        const { token } = await acquire(r);
        const version = async () =>
          (await pool.query(`SELECT xmin::text, xmax::text FROM "${table}" WHERE scope = $1 AND key = $2`, [r.scope, r.key])).rows[0];
        const inFlight = await version();
        expect((await store.claim(r, 'fp', opts)).kind).toBe('in_flight');
        expect((await store.claim(r, 'other', opts)).kind).toBe('mismatch');
        expect(await version()).toEqual(inFlight);
        await store.complete(r, token, ok);
        const completed = await version();
        expect((await store.claim(r, 'fp', opts)).kind).toBe('completed');
        expect(await version()).toEqual(completed);
        expect(completed.xmax).toBe('0');
      });

      it('makes a take-over that races a committing completion wait for it, then replay', async () => {
        const r = ref();
        const { token } = await acquire(r);
        await expireLease(r);
        const tx = await store.beginTransaction();
        await tx.complete(r, token, ok);
        // The row is locked by the uncommitted completion; this claim first reads "lease expired".
        const racing = store.claim(r, 'fp', opts);
        await until(
          async () =>
            (await pool.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%${table}_claim%'`))
              .rows[0].n === '1',
          'the claim to wait on the row lock',
        );
        await tx.commit();
        const claim = await racing;
        expect(claim.kind).toBe('completed');
      });
    });

    describe('transactional mode', () => {
      it('commits the business write and the completion together', async () => {
        const r = ref();
        const { token } = await acquire(r);
        const tx = await store.beginTransaction();
        await tx.tx.query(`INSERT INTO "${table}_effects" (key) VALUES ($1)`, [r.key]);
        await tx.complete(r, token, ok);
        await tx.commit();
        expect(await effects(r.key)).toBe(1);
        expect((await store.get(r))?.state).toBe('completed');
      });

      it('rolls back both together', async () => {
        const r = ref();
        const { token } = await acquire(r);
        const tx = await store.beginTransaction();
        await tx.tx.query(`INSERT INTO "${table}_effects" (key) VALUES ($1)`, [r.key]);
        await tx.checkpoint(r, token, 'inserted');
        await tx.complete(r, token, ok);
        await tx.rollback();
        expect(await effects(r.key)).toBe(0);
        expect(await store.get(r)).toMatchObject({ state: 'in_flight', recoveryPoint: undefined });
      });

      it('refuses a stale token inside the transaction, so the business write rolls back', async () => {
        const r = ref();
        const first = await acquire(r);
        await expireLease(r);
        const second = await acquire(r);
        expect(second.takeover).toBe(true);
        const late = await store.beginTransaction();
        await late.tx.query(`INSERT INTO "${table}_effects" (key) VALUES ($1)`, [r.key]);
        await expect(late.checkpoint(r, first.token, 'x')).rejects.toBeInstanceOf(LeaseLostError);
        await late.rollback();
        const again = await store.beginTransaction();
        await again.tx.query(`INSERT INTO "${table}_effects" (key) VALUES ($1)`, [r.key]);
        await expect(again.complete(r, first.token, ok)).rejects.toBeInstanceOf(LeaseLostError);
        await again.rollback();
        expect(await effects(r.key)).toBe(0);
        expect((await store.get(r))?.state).toBe('in_flight');
      });

      it('refuses to report a commit that PostgreSQL turned into a rollback', async () => {
        const own = newPool({ max: 1 });
        pools.push(own);
        const tx = await postgresStore({ pool: own, table }).beginTransaction();
        await tx.tx.query('SELECT 1 / 0').catch(() => {});
        await expect(tx.commit()).rejects.toThrow(/COMMIT rolled it back/);
        // The connection itself is healthy, so it went back to the pool rather than being discarded.
        expect([own.totalCount, own.idleCount]).toEqual([1, 1]);
        await tx.rollback();
        expect((await own.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
      });

      it('discards a client whose connection died mid-transaction, without crashing', async () => {
        const own = newPool({ max: 1 });
        pools.push(own);
        const s = postgresStore({ pool: own, table });
        const tx = await s.beginTransaction();
        const pid = (await tx.tx.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
        await pool.query('SELECT pg_terminate_backend($1)', [pid]);
        await until(async () => (await pool.query('SELECT count(*) AS n FROM pg_stat_activity WHERE pid = $1', [pid])).rows[0].n === '0', 'the backend to exit');
        await expect(tx.commit()).rejects.toBeInstanceOf(StoreUnavailableError);
        expect(own.totalCount).toBe(0);
        // The pool of one connection works again.
        expect((await s.claim(ref(), 'fp', opts)).kind).toBe('acquired');
      });

      it('refuses statements on a transaction that has ended, since its client is back in the pool', async () => {
        const r = ref();
        const { token } = await acquire(r);
        const counting = countingPool(pool);
        const tx = await postgresStore({ pool: counting.pool, table }).beginTransaction();
        await tx.commit();
        counting.take();
        await expect(tx.complete(r, token, ok)).rejects.toMatchObject({ code: 'ERR_IDEMKIT_TRANSACTION_ENDED' });
        await expect(tx.checkpoint(r, token, 'x')).rejects.toMatchObject({ code: 'ERR_IDEMKIT_TRANSACTION_ENDED' });
        await tx.rollback();
        expect(counting.take()).toEqual([]);
        expect((await store.get(r))?.state).toBe('in_flight');
      });

      it('runs a web handler on ctx.tx and commits its write with the record', async () => {
        let executions = 0;
        const handle = withIdempotency(
          async (request, ctx) => {
            executions++;
            await ctx!.tx.query(`INSERT INTO "${table}_effects" (key, note) VALUES ($1, $2)`, [ctx!.key, await request.text()]);
            if (ctx!.key.endsWith('-fail')) throw new Error('boom');
            return new Response('charged', { status: 201 });
          },
          { store, transactional: true, scope: () => 'web' },
        );
        const post = (key: string) => handle(new Request('http://local/charges', { method: 'POST', headers: { 'idempotency-key': key }, body: 'x' }));
        const key = `k-${randomUUID()}`;
        expect((await post(key)).status).toBe(201);
        const replay = await post(key);
        expect(replay.status).toBe(201);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(await effects(key)).toBe(1);
        const failing = `k-${randomUUID()}-fail`;
        expect((await post(failing)).status).toBe(500);
        expect(await effects(failing)).toBe(0);
        expect(await store.get({ scope: 'web', key: failing })).toBeUndefined();
        expect(executions).toBe(2);
      });
    });

    describe('reaper', () => {
      it('deletes each expired row once from 3 pools at once, and no live row', async () => {
        // A table of its own, so the expected count is exact.
        const reapTable = uniqueTable();
        await postgresStore({ pool, table: reapTable }).migrate();
        const scope = 'reap';
        const insert = (state: string, lease: string, expires: string, n: number, prefix: string) =>
          pool.query(
            `INSERT INTO "${reapTable}" (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, status, headers)
             SELECT $1, $2 || i, 'fp', $3, md5(random()::text), 1, now() + $4::interval, now() + $5::interval, 200, '[]'
               FROM generate_series(1, $6) AS i`,
            [scope, prefix, state, lease, expires, n],
          );
        await insert('completed', '-1 hour', '-1 minute', 300, 'done-');
        await insert('in_flight', '-1 hour', '-1 minute', 200, 'dead-');
        await insert('in_flight', '1 hour', '-1 minute', 20, 'live-lease-');
        await insert('completed', '-1 hour', '1 hour', 20, 'in-window-');
        const reapers = morePools(3).map((p) => postgresStore({ pool: p, table: reapTable }));
        const counts = await Promise.all(
          reapers.map(async (reaper) => {
            let total = 0;
            for (let n = -1; n !== 0; total += n) {
              n = await reaper.reap(25);
              expect(n).toBeLessThanOrEqual(25);
            }
            return total;
          }),
        );
        const left = await pool.query(`SELECT key FROM "${reapTable}"`);
        await dropTable(pool, reapTable);
        expect(counts.reduce((a, b) => a + b, 0)).toBe(500);
        expect(left.rows.map((row: { key: string }) => row.key.replace(/\d+$/, '')).sort()).toEqual([
          ...Array<string>(20).fill('in-window-'),
          ...Array<string>(20).fill('live-lease-'),
        ]);
      });
    });

    describe('bad rows', () => {
      const corrupt = async (r: RecordRef, set: string) => {
        await pool.query(`UPDATE "${table}" SET ${set} WHERE scope = $1 AND key = $2`, [r.scope, r.key]);
      };
      const namesTheKey = (r: RecordRef) => (error: unknown) => {
        expect(error).toBeInstanceOf(IdemkitError);
        expect((error as IdemkitError).code).toBe('ERR_IDEMKIT_CORRUPT_RECORD');
        expect((error as Error).message).toContain(r.key);
        expect((error as Error).message).toContain(r.scope);
        return true;
      };

      it('names the key when stored headers are not a header list', async () => {
        const r = ref();
        const { token } = await acquire(r);
        await store.complete(r, token, ok);
        await corrupt(r, `headers = '{"content-type": "text/plain"}'`);
        expect(namesTheKey(r)(await store.claim(r, 'fp', opts).catch((e: unknown) => e))).toBe(true);
        expect(namesTheKey(r)(await store.get(r).catch((e: unknown) => e))).toBe(true);
        // Other keys are unaffected.
        expect((await store.claim(ref(), 'fp', opts)).kind).toBe('acquired');
      });

      it('names the key when recovery data is not JSON', async () => {
        const r = ref();
        await acquire(r);
        await corrupt(r, `recovery_data = '{not json'`);
        expect(namesTheKey(r)(await store.get(r).catch((e: unknown) => e))).toBe(true);
        await expireLease(r);
        expect(namesTheKey(r)(await store.claim(r, 'fp', opts).catch((e: unknown) => e))).toBe(true);
      });
    });

    describe('round trips', () => {
      it('costs one statement per claim, completion and replay; transactions add only their own statements', async () => {
        const counting = countingPool(pool);
        const s = postgresStore({ pool: counting.pool, table });
        const r = ref();
        const claim = await s.claim(r, 'fp', opts);
        expect(counting.take()).toEqual([`SELECT outcome, retry_after_ms,`]);
        if (claim.kind !== 'acquired') throw new Error(claim.kind);
        await s.complete(r, claim.token, ok);
        expect(counting.take()).toEqual([`UPDATE "public"."${table}" SET`]);
        expect((await s.claim(r, 'fp', opts)).kind).toBe('completed');
        expect(counting.take()).toHaveLength(1);
        // The record with its times (createdAt, updatedAt): one SELECT.
        const record = await s.get(r);
        expect(counting.take()).toEqual(['SELECT state, fingerprint,']);
        expect(typeof record?.createdAt).toBe('number');
        expect(record!.updatedAt!).toBeGreaterThanOrEqual(record!.createdAt!);

        const r2 = ref();
        const second = await s.claim(r2, 'fp', opts);
        if (second.kind !== 'acquired') throw new Error(second.kind);
        counting.take();
        const tx = await s.beginTransaction();
        expect(counting.take()).toEqual(['BEGIN']);
        await tx.tx.query(`INSERT INTO "${table}_effects" (key) VALUES ($1)`, [r2.key]);
        counting.take();
        await tx.complete(r2, second.token, ok);
        expect(counting.take()).toEqual([`UPDATE "public"."${table}" SET`]);
        await tx.commit();
        expect(counting.take()).toEqual(['COMMIT']);
        expect((await store.get(r2))?.state).toBe('completed');
      });

      it('costs a web request 2 statements, a replay 1, and transactional mode only BEGIN and COMMIT more', async () => {
        const counting = countingPool(pool);
        const s = postgresStore({ pool: counting.pool, table });
        const claim = 'SELECT outcome, retry_after_ms,';
        const complete = `UPDATE "public"."${table}" SET`;
        for (const transactional of [false, true]) {
          const handle = withIdempotency(
            async (_request, ctx) => {
              if (ctx?.tx) await ctx.tx.query('SELECT 1');
              return new Response('ok', { status: 201 });
            },
            { store: s, transactional, scope: () => 'round-trips' },
          );
          const key = `k-${randomUUID()}`;
          const post = () => handle(new Request('http://local/x', { method: 'POST', headers: { 'idempotency-key': key }, body: '{}' }));
          counting.take();
          expect((await post()).status).toBe(201);
          expect(counting.take()).toEqual(transactional ? [claim, 'BEGIN', 'SELECT 1', complete, 'COMMIT'] : [claim, complete]);
          expect((await post()).headers.get('idempotent-replayed')).toBe('true');
          expect(counting.take()).toEqual([claim]);
        }
      });
    });
  });
  describe('misconfiguration is loud', () => {
    it('verify() names the missing table and claim function and store.migrate(), and resolves once migrated', async () => {
      const pool = newPool({ max: 2 });
      const table = uniqueTable();
      try {
        const store = postgresStore({ pool, table });
        const error = await store.verify().then(() => undefined, (e: unknown) => e);
        expect(error).toBeInstanceOf(StoreSchemaMissingError);
        expect((error as StoreSchemaMissingError).code).toBe('ERR_IDEMKIT_STORE_SCHEMA_MISSING');
        expect((error as StoreSchemaMissingError).missing).toEqual([`table public.${table}`, `function public.${table}_claim`]);
        expect((error as Error).message).toContain('await store.migrate()');
        await store.migrate();
        await expect(store.verify()).resolves.toBeUndefined();
        // A table without its function (dropped by hand) is named alone.
        await pool.query(`DROP FUNCTION "public"."${table}_claim"`);
        await expect(store.verify()).rejects.toMatchObject({ missing: [`function public.${table}_claim`] });
      } finally {
        await dropTable(pool, table);
        await pool.end();
      }
    });

    it('an unmigrated table: every request answers 500 store-schema-missing without Retry-After; one error line names what is missing and the fix; 100 more log nothing within the minute', async () => {
      vi.useFakeTimers({ toFake: ['Date'] });
      const pool = newPool({ max: 4 });
      try {
        const table = uniqueTable();
        const store = postgresStore({ pool, table });
        const lines: Array<{ level: string; message: string }> = [];
        const logger = {
          warn: (message: string) => lines.push({ level: 'warn', message }),
          error: (message: string) => lines.push({ level: 'error', message }),
        };
        let executed = 0;
        const handle = withIdempotency(() => new Response(`ok ${++executed}`, { status: 201 }), { store, logger });
        const post = () => handle(new Request('http://local/orders', { method: 'POST', headers: { 'idempotency-key': `k-${randomUUID()}` }, body: 'x' }));
        const first = await post();
        expect(first.status).toBe(500);
        expect(first.headers.get('retry-after')).toBeNull();
        expect(first.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        const problem = (await first.json()) as Record<string, unknown>;
        expect(problem).toMatchObject({ type: 'urn:idemkit:problem:store-schema-missing', status: 500 });
        // The client learns nothing of the schema; the log says it all.
        expect(JSON.stringify(problem)).not.toContain(table);
        expect(lines).toHaveLength(1);
        expect(lines[0]!.level).toBe('error');
        expect(lines[0]!.message).toBe(
          `idemkit: ERR_IDEMKIT_STORE_SCHEMA_MISSING: postgres store: missing table public.${table}, function public.${table}_claim; run \`await store.migrate()\` or \`idemkit migrate\` (or apply sql/postgres.sql for the default names)`,
        );
        for (let i = 0; i < 100; i++) {
          const response = await post();
          expect(response.status).toBe(500);
          expect(response.headers.get('retry-after')).toBeNull();
        }
        expect(lines).toHaveLength(1);
        // A minute on, the same failure is logged again, with how many were left out.
        vi.setSystemTime(Date.now() + 60_000);
        expect((await post()).status).toBe(500);
        expect(lines).toHaveLength(2);
        expect(lines[1]!.message).toContain('100 more like it');
        expect(executed).toBe(0);
        // Migrated, the same store serves at once: nothing was cached about the missing schema.
        await store.migrate();
        expect((await post()).status).toBe(201);
        expect(executed).toBe(1);
      } finally {
        vi.useRealTimers();
        await pool.end();
      }
    });

    it('a table without the columns this version writes: a completion fails as store-schema-missing naming them, not as an outage', async () => {
      const pool = newPool({ max: 2 });
      const table = uniqueTable();
      try {
        const store = postgresStore({ pool, table });
        await store.migrate();
        const r = ref();
        const claim = await store.claim(r, 'fp', opts);
        if (claim.kind !== 'acquired') throw new Error(claim.kind);
        await pool.query(`ALTER TABLE "public"."${table}" DROP COLUMN updated_at`);
        const error = await store.complete(r, claim.token, ok).then(() => undefined, (e: unknown) => e);
        expect(error).toBeInstanceOf(StoreSchemaMissingError);
        expect((error as StoreSchemaMissingError).missing).toEqual([`column public.${table}.updated_at`]);
      } finally {
        await dropTable(pool, table);
        await pool.end();
      }
    });
  });
});
