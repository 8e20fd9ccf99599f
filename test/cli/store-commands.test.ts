/**
 * The `idemkit` store commands against every store that has a URL: SQLite (a temp file),
 * PostgreSQL, MySQL/MariaDB, Redis, and a Redis Cluster, each with its own table or key prefix.
 * Each command runs once as users run it (a subprocess: `npm run idemkit -- …`); its other flags
 * run through the same `main` in this process, which is what the executable calls (a process
 * start costs a second or two here). The memory store has no URL; the store contract covers its
 * admin capability.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Cluster, Redis } from 'ioredis';
import { createPool } from 'mysql2/promise';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore, RecordRef, StoredResponse } from '../../src/core/store.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { dynamodbStore } from '../../src/stores/dynamodb/index.js';
import { main } from '../../src/cli/run.js';
import type { CliRun } from '../check/cli.js';
import { runCli } from '../check/cli.js';
import type { RedisClusterHandle } from '../support/redis-servers.js';
import { deleteKeys, requireRedisBinaries, startRedisCluster } from '../support/redis-servers.js';
import { MARIADB, POSTGRES, REDIS, requireService } from '../support/services.js';
import { startDynalite } from '../stores/dynamodb-support.js';

const [pgUp, mysqlUp, redisUp] = [await requireService(POSTGRES), await requireService(MARIADB), await requireService(REDIS)];
const clusterBinaries = requireRedisBinaries();

const LIVE = { leaseMs: 3_600_000, windowMs: 7_200_000 };
const json = (body: string): StoredResponse => ({ status: 201, headers: [['content-type', 'application/json']], body: new TextEncoder().encode(body), bodyOmitted: false });
const name = () => `idem_cli_${randomBytes(4).toString('hex')}`;

/** The CLI's `main` in this process, with its output captured as a subprocess's would be. */
async function inProcess(args: readonly string[]): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, { out: (text) => (stdout += `${text}\n`), err: (text) => (stderr += `${text}\n`), tty: false });
  return { code, stdout, stderr };
}

interface Target {
  /** The URL and name flags every command gets. */
  readonly args: string[];
  /** The same store, in this process, to seed records and check what the CLI did. */
  readonly store: IdempotencyStore;
  readonly sql: boolean;
  /** What `migrate` rightly warns of on this backend (dynalite has no TTL API); otherwise it prints nothing on stderr. */
  readonly migrateWarning?: RegExp;
  close(): Promise<void>;
}

/** The scenario every store runs: migrate twice, then each command on seeded records. */
function storeCommands(label: string, skip: boolean, open: () => Promise<Target>) {
  describe.skipIf(skip)(`idemkit store commands on ${label}`, () => {
    let t: Target;
    /** As a subprocess. */
    const cli = (...args: string[]) => runCli([...args, ...t.args]);
    /** In this process. */
    const run = (...args: string[]) => inProcess([...args, ...t.args]);
    const scope = `tenant-${randomBytes(3).toString('hex')}`;
    const ref = (key: string): RecordRef => ({ scope, key });
    let doneToken = '';

    beforeAll(async () => {
      t = await open();
    });
    afterAll(async () => {
      await t?.close();
    });

    it('migrate creates what is missing, says so, and is safe to run twice (before it, other commands name the fix)', async () => {
      if (t.sql) {
        const before = await run('stats');
        expect(before.code).toBe(2);
        expect(before.stderr).toMatch(/^idemkit stats: .*run `idemkit migrate` first/);
        expect(before.stderr).not.toMatch(/\n\s+at /);
      }
      const first = await cli('migrate');
      if (t.migrateWarning) expect(first.stderr).toMatch(t.migrateWarning);
      else expect(first.stderr).toBe('');
      expect(first.code).toBe(0);
      const second = await run('migrate');
      expect(second.code).toBe(0);
      if (t.sql) {
        expect(first.stdout).toMatch(/table \S+: created/);
        expect(first.stdout).not.toMatch(/table \S+: already present/);
        expect(second.stdout).toMatch(/table \S+: already present/);
        expect(second.stdout).not.toMatch(/created/);
        const asJson = JSON.parse((await run('migrate', '--json')).stdout) as { created: string[]; present: string[]; added: string[] };
        expect(asJson.created).toEqual([]);
        expect(asJson.added).toEqual([]);
        expect(asJson.present.length).toBeGreaterThan(0);
      } else {
        expect(first.stdout).toMatch(/nothing to migrate/);
      }
    });

    it('seeds records through the store (the same table or prefix)', async () => {
      const done = await t.store.claim(ref('done'), 'fp-done', LIVE);
      if (done.kind !== 'acquired') throw new Error(done.kind);
      doneToken = done.token;
      await t.store.complete(ref('done'), done.token, json('{"id":"ch_1"}'));
      const bin = await t.store.claim(ref('bin'), 'fp-bin', LIVE);
      if (bin.kind !== 'acquired') throw new Error(bin.kind);
      await t.store.complete(ref('bin'), bin.token, { status: 200, headers: [], body: Uint8Array.from([0, 1, 2, 255]), bodyOmitted: false });
      const gone = await t.store.claim(ref('gone'), 'fp-gone', LIVE);
      if (gone.kind !== 'acquired') throw new Error(gone.kind);
      await t.store.checkpoint(ref('gone'), gone.token, 'charged', { chargeId: 'ch_9' });
      // The owner gives its lease back: in flight, lease over, window open.
      expect(await t.store.renew(ref('gone'), gone.token, 0)).toBe(true);
      expect((await t.store.claim(ref('live'), 'fp-live', LIVE)).kind).toBe('acquired');
      expect((await t.store.claim({ scope: `${scope}-other`, key: 'elsewhere' }, 'fp', LIVE)).kind).toBe('acquired');
    });

    it('inspect shows a record, with only a prefix of its owner token, as text and as JSON', async () => {
      const text = await run('inspect', 'done', '--scope', scope);
      expect(text.code).toBe(0);
      expect(text.stdout).toMatch(/^state\s+completed$/m);
      expect(text.stdout).toMatch(/^fingerprint\s+fp-done$/m);
      expect(text.stdout).toMatch(/^status\s+201$/m);
      expect(text.stdout).toMatch(/^headers\s+content-type: application\/json$/m);
      expect(text.stdout).toMatch(/^body\s+13 bytes, text: \{"id":"ch_1"\}$/m);
      expect(text.stdout).not.toContain(doneToken);
      // When it was claimed and when it completed, on the store's clock.
      expect(text.stdout).toMatch(/^created\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(\d+(ms|s) ago\)$/m);
      expect(text.stdout).toMatch(/^updated\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(\d+(ms|s) ago\)$/m);
      const parsed = JSON.parse((await cli('inspect', 'done', '--scope', scope, '--json')).stdout) as Record<string, unknown>;
      expect(parsed).toMatchObject({ scope, key: 'done', state: 'completed', expired: false, fingerprint: 'fp-done', attempt: 1, recoveryPoint: null });
      expect(parsed.response).toEqual({
        status: 201,
        headers: [['content-type', 'application/json']],
        bodyOmitted: false,
        body: { bytes: 13, encoding: 'utf8', preview: '{"id":"ch_1"}', truncated: false },
      });
      expect(String(parsed.tokenPrefix).length).toBeLessThanOrEqual(8);
      expect(doneToken.startsWith(String(parsed.tokenPrefix))).toBe(true);
      expect(Date.parse(String(parsed.expiresAt))).toBeGreaterThan(Date.parse(String(parsed.leaseUntil)));
      // Created when claimed, updated when completed: ISO times, in that order, not after the read.
      const [createdAt, updatedAt, now] = [parsed.createdAt, parsed.updatedAt, parsed.now].map((v) => Date.parse(String(v)));
      expect(createdAt).toBeLessThanOrEqual(updatedAt!);
      expect(updatedAt).toBeLessThanOrEqual(now!);
      // Not 1970: a time these stores now keep.
      expect(createdAt).toBeGreaterThan(Date.UTC(2020, 0, 1));

      const binary = await run('inspect', 'bin', '--scope', scope);
      expect(binary.stdout).toMatch(/^body\s+4 bytes, binary: 000102ff$/m);
      const gone = JSON.parse((await run('inspect', 'gone', '--scope', scope, '--json')).stdout) as Record<string, unknown>;
      expect(gone).toMatchObject({ state: 'in_flight', recoveryPoint: 'charged', recoveryData: { chargeId: 'ch_9' }, response: null });

      const missing = await run('inspect', 'nope', '--scope', scope);
      expect(missing.code).toBe(1);
      expect(missing.stderr).toMatch(/^idemkit inspect: no record for key "nope" in scope/);
    });

    it('list filters by scope, state and age, oldest lease first, up to --limit', async () => {
      const keys = async (...args: string[]) => {
        const listed = await run('list', '--json', ...args);
        expect(listed.code).toBe(0);
        return (JSON.parse(listed.stdout) as { records: Array<{ key: string }> }).records.map((r) => r.key);
      };
      const child = await cli('list', '--json', '--scope', scope);
      expect(child.code).toBe(0);
      expect((JSON.parse(child.stdout) as { records: Array<{ key: string }> }).records.map((r) => r.key).sort()).toEqual(['bin', 'done', 'gone', 'live']);
      expect((await keys('--scope', scope, '--state', 'in_flight')).sort()).toEqual(['gone', 'live']);
      expect((await keys('--scope', scope, '--state', 'completed')).sort()).toEqual(['bin', 'done']);
      // By creation: every record was claimed at least 0 s ago, none a day ago.
      expect((await keys('--scope', scope, '--state', 'in_flight', '--older-than', '0s')).sort()).toEqual(['gone', 'live']);
      expect(await keys('--scope', scope, '--older-than', '1d')).toEqual([]);
      expect(await keys('--scope', scope, '--limit', '1')).toEqual(['gone']);
      expect(await keys()).toContain('elsewhere');
      const text = await run('list', '--scope', scope);
      expect(text.stdout.split('\n')[0]).toMatch(/^STATE\s+SCOPE\s+KEY\s+AGE\s+LEASE UNTIL/);
      expect(text.stdout).toMatch(/in_flight\s+"tenant-\w+"\s+"gone"\s+\d+(ms|s)\s+\d{4}-/);
      const listed = JSON.parse((await run('list', '--json', '--scope', scope)).stdout) as { records: Array<{ createdAt: string | null; updatedAt: string | null }> };
      for (const r of listed.records) expect(Date.parse(String(r.createdAt))).toBeLessThanOrEqual(Date.parse(String(r.updatedAt)));
      const bad = await run('list', '--older-than', 'soon');
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/^idemkit list: --older-than: expected a duration/);
    });

    it('stats counts by state, names the longest-gone owner, and sums the bodies', async () => {
      const child = await cli('stats', '--json');
      expect(child.code).toBe(0);
      const stats = JSON.parse(child.stdout) as Record<string, unknown>;
      expect(stats).toMatchObject({ inFlight: 3, abandoned: 1, completed: 2, expired: 0, bodyBytes: 13 + 4 });
      expect(stats.oldestInFlight).toMatchObject({ scope, key: 'gone' });
      const text = await run('stats');
      expect(text.stdout).toMatch(/^in flight\s+3 \(1 abandoned/m);
      expect(text.stdout).toMatch(/^completed\s+2$/m);
    });

    it('purge refuses without --yes, refuses in flight without --force, and reports a missing record', async () => {
      const noYes = await run('purge', 'live', '--scope', scope);
      expect(noYes.code).toBe(1);
      expect(noYes.stderr).toMatch(/without --yes/);
      const inFlight = await cli('purge', 'live', '--scope', scope, '--yes');
      expect(inFlight.code).toBe(1);
      expect(inFlight.stderr).toMatch(/is in flight .*--force/);
      expect((await t.store.get(ref('live')))?.state).toBe('in_flight');
      const forced = await cli('purge', 'live', '--scope', scope, '--yes', '--force');
      expect(forced.code).toBe(0);
      expect(await t.store.get(ref('live'))).toBeUndefined();
      const again = await run('purge', 'live', '--scope', scope, '--yes', '--json');
      expect(again.code).toBe(1);
      expect(JSON.parse(again.stdout)).toEqual({ outcome: 'not_found' });
      expect((await run('purge', 'done', '--scope', scope, '--yes')).code).toBe(0);
      expect(await t.store.get(ref('done'))).toBeUndefined();
      expect((await t.store.claim(ref('done'), 'fp-new', LIVE)).kind).toBe('acquired');
    });

    it('reap deletes expired records only, and counts them', async () => {
      const old = await t.store.claim(ref('old'), 'fp-old', { leaseMs: 1, windowMs: 1 });
      if (old.kind !== 'acquired') throw new Error(old.kind);
      await t.store.complete(ref('old'), old.token, json('{}'));
      // Its window (1 ms) has passed by the time a process has started.
      const child = await cli('reap', '--json');
      expect(child.code).toBe(0);
      expect(JSON.parse(child.stdout)).toEqual({ reaped: 1 });
      expect(await t.store.get(ref('old'))).toBeUndefined();
      expect((await t.store.get(ref('gone')))?.state).toBe('in_flight');
      expect((await run('reap')).stdout).toBe('reaped 0 expired records\n');
    });
  });
}

storeCommands('SQLite', false, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-cli-'));
  const file = join(dir, 'records.db');
  // An empty database: the file exists, the table does not (yet).
  new Database(file).close();
  const table = name();
  // The CLI's migrate creates the file and table; the test's store opens it afterwards.
  let db: InstanceType<typeof Database> | undefined;
  let store: IdempotencyStore | undefined;
  const lazy = () => (store ??= sqliteStore({ database: (db = new Database(file)), table }));
  const proxy = new Proxy({} as IdempotencyStore, { get: (_, p) => Reflect.get(lazy(), p) as unknown });
  return {
    args: ['--store', `sqlite:${file}`, '--table', table],
    store: proxy,
    sql: true,
    close: async () => {
      db?.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

const PG_URL = `postgres://${process.env.PGUSER ?? 'postgres'}@127.0.0.1:5432/test`;
storeCommands('PostgreSQL', !pgUp, async () => {
  const pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
  pool.on('error', () => {});
  const table = name();
  return {
    args: ['--store', PG_URL, '--table', table],
    store: postgresStore({ pool, table }),
    sql: true,
    close: async () => {
      await pool.query(`DROP FUNCTION IF EXISTS "public"."${table}_claim"; DROP TABLE IF EXISTS "public"."${table}"`);
      await pool.end();
    },
  };
});

const MYSQL_URL = 'mysql://root@127.0.0.1:3306/test';
storeCommands('MySQL/MariaDB', !mysqlUp, async () => {
  const pool = createPool({ uri: MYSQL_URL, connectionLimit: 4 });
  const table = name();
  return {
    args: ['--store', MYSQL_URL, '--table', table],
    store: mysqlStore({ pool, table }),
    sql: true,
    close: async () => {
      await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
      await pool.end();
    },
  };
});

storeCommands('Redis', !redisUp, async () => {
  const client = new Redis(REDIS.port, REDIS.host, { maxRetriesPerRequest: 1 });
  const prefix = name();
  return {
    args: ['--store', `redis://${REDIS.host}:${REDIS.port}`, '--prefix', prefix],
    store: redisStore({ client, prefix }),
    sql: false,
    close: async () => {
      await deleteKeys(client, `${prefix}:*`);
      client.disconnect();
    },
  };
});

// dynalite, started here on a spare port (the CLI's subprocesses reach it over HTTP) and closed by the test.
storeCommands('DynamoDB (dynalite)', false, async () => {
  const db = await startDynalite();
  const table = name();
  return {
    args: ['--store', db.endpoint.replace(/^http:/, 'dynamodb+http:'), '--table', table],
    // The seeding store's clock runs 6 s behind the CLI's: past the 5 s clock margin, so the 1 ms
    // window of the record the reap case writes has ended for the CLI, without a sleep.
    store: dynamodbStore({ client: db.client(), table, clock: () => Date.now() - 6_000 }),
    sql: true,
    migrateWarning: /^dynamodb store: this endpoint has no UpdateTimeToLive .*only store\.reap\(\) deletes expired records\n$/,
    close: () => db.close(),
  };
});

storeCommands('a 3-master Redis Cluster', !clusterBinaries, async () => {
  const cluster: RedisClusterHandle = await startRedisCluster(3);
  const client = new Cluster([...cluster.nodes], { redisOptions: { maxRetriesPerRequest: 1 } });
  client.on('error', () => {});
  await new Promise<void>((resolve) => client.once('ready', resolve));
  const prefix = name();
  return {
    args: ['--store', `redis+cluster://${cluster.nodes.map((n) => `${n.host}:${n.port}`).join(',')}`, '--prefix', prefix],
    store: redisStore({ client, prefix }),
    sql: false,
    close: async () => {
      client.disconnect();
      await cluster.stop();
    },
  };
});

/**
 * `idemkit migrate` on a table the previous release created (its schema copied into
 * test/stores/fixtures): it adds created_at and updated_at, says so, then finds nothing to add;
 * the old record stays readable, with unknown times, and a new one has them.
 */
function upgradeOf(label: string, skip: boolean, open: () => Promise<{ args: string[]; createOld: () => Promise<void>; store: () => IdempotencyStore; close(): Promise<void> }>) {
  it.skipIf(skip)(`migrate upgrades a ${label} table of the previous schema in place`, async () => {
    const t = await open();
    try {
      await t.createOld();
      const first = await inProcess(['migrate', ...t.args]);
      expect(first.stderr).toBe('');
      expect(first.stdout).toMatch(/table \S+: already present/);
      expect(first.stdout).toMatch(/column \S+\.created_at: added; column \S+\.updated_at: added/);
      const again = JSON.parse((await inProcess(['migrate', '--json', ...t.args])).stdout) as { created: string[]; added: string[] };
      expect(again).toMatchObject({ created: [], added: [] });
      const old = JSON.parse((await inProcess(['inspect', 'old', '--scope', 't', '--json', ...t.args])).stdout) as Record<string, unknown>;
      expect(old).toMatchObject({ state: 'completed', createdAt: null, updatedAt: null });
      expect((await inProcess(['inspect', 'old', '--scope', 't', ...t.args])).stdout).toMatch(/^created\s+unknown \(written by an earlier idemkit\)$/m);
      const listed = await inProcess(['list', '--scope', 't', ...t.args]);
      expect(listed.stdout).toMatch(/^completed\s+"t"\s+"old"\s+\?\s/m);
      expect(listed.stdout).toMatch(/^\? age unknown/m);
      expect((await t.store().claim({ scope: 't', key: 'new' }, 'fp', LIVE)).kind).toBe('acquired');
      const fresh = JSON.parse((await inProcess(['inspect', 'new', '--scope', 't', '--json', ...t.args])).stdout) as Record<string, unknown>;
      expect(fresh.createdAt).toBe(fresh.updatedAt);
      expect(Date.parse(String(fresh.createdAt))).toBeGreaterThan(Date.UTC(2020, 0, 1));
    } finally {
      await t.close();
    }
  });
}

describe('idemkit migrate: the upgrade from the previous schema', () => {
  upgradeOf('SQLite', false, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idemkit-cli-'));
    const file = join(dir, 'records.db');
    const table = name();
    let db: InstanceType<typeof Database> | undefined;
    return {
      args: ['--store', `sqlite:${file}`, '--table', table],
      async createOld() {
        const old = new Database(file);
        old.exec(`CREATE TABLE ${table} (
          scope TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
          state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')), token TEXT NOT NULL, attempt INTEGER NOT NULL,
          lease_until INTEGER NOT NULL, expires_at INTEGER NOT NULL, recovery_point TEXT, recovery_data TEXT,
          status INTEGER, headers TEXT, body BLOB, body_omitted INTEGER NOT NULL DEFAULT 0,
          PRIMARY KEY (scope, key)
        ) WITHOUT ROWID;
        CREATE INDEX ${table}_expires_at ON ${table} (expires_at);`);
        old.prepare(`INSERT INTO ${table} (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, status, headers, body)
          VALUES ('t', 'old', 'fp', 'completed', '', 1, ?, ?, 201, '[]', X'7b7d')`).run(Date.now() - 1000, Date.now() + 3_600_000);
        old.close();
      },
      store: () => sqliteStore({ database: (db ??= new Database(file)), table }),
      close: async () => {
        db?.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  });

  upgradeOf('PostgreSQL', !pgUp, async () => {
    const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
    pool.on('error', () => {});
    const table = name();
    return {
      args: ['--store', PG_URL, '--table', table],
      async createOld() {
        const previous = readFileSync(new URL('../stores/fixtures/postgres-before-timestamps.sql', import.meta.url), 'utf8').replaceAll('idempotency_records', table);
        const client = await pool.connect();
        try {
          await client.query(`BEGIN; ${previous}; COMMIT`);
        } finally {
          client.release();
        }
        await pool.query(`INSERT INTO "${table}" (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, status, headers, body)
          VALUES ('t', 'old', 'fp', 'completed', '', 1, now() - interval '1 second', now() + interval '1 hour', 201, '[]', 'x')`);
      },
      store: () => postgresStore({ pool, table }),
      close: async () => {
        await pool.query(`DROP FUNCTION IF EXISTS "public"."${table}_claim"; DROP TABLE IF EXISTS "public"."${table}"`);
        await pool.end();
      },
    };
  });

  upgradeOf('MySQL/MariaDB', !mysqlUp, async () => {
    const pool = createPool({ uri: MYSQL_URL, connectionLimit: 2 });
    const table = name();
    return {
      args: ['--store', MYSQL_URL, '--table', table],
      async createOld() {
        const previous = readFileSync(new URL('../stores/fixtures/mysql-before-timestamps.sql', import.meta.url), 'utf8');
        await pool.query(previous.replace('`idempotency_records`', `\`${table}\``));
        const now = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)`;
        await pool.query(`INSERT INTO \`${table}\` (scope, idem_key, fingerprint, state, token, revision, attempt, lease_until, expires_at, status, headers, body)
          VALUES ('t', 'old', 'fp', 'completed', '', 1, 1, ${now} - 1000, ${now} + 3600000, 201, '[]', 'x')`);
      },
      store: () => mysqlStore({ pool, table }),
      close: async () => {
        await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
        await pool.end();
      },
    };
  });
});

describe('idemkit store commands: errors are one line, exit code 2, never a stack trace', () => {
  const oneLine = (stderr: string) => {
    expect(stderr).not.toMatch(/\n\s+at /);
    return stderr.split('\n')[0]!;
  };

  it('names the URL forms for an unsupported URL, and asks for one when none is given', async () => {
    const bad = await runCli(['list', '--store', 'mongodb://127.0.0.1/x']);
    expect(bad.code).toBe(2);
    expect(oneLine(bad.stderr)).toMatch(/^idemkit list: unsupported store URL "mongodb:\/\/127\.0\.0\.1\/x"; expected sqlite:FILE, postgres:\/\/…/);
    const none = await inProcess(['stats']);
    expect(none.code).toBe(2);
    expect(oneLine(none.stderr)).toMatch(/--store URL is required \(or set IDEMKIT_STORE_URL\)/);
    const flag = await inProcess(['stats', '--store', 'sqlite:/nonexistent/x.db', '--bogus']);
    expect(flag.code).toBe(2);
    expect(oneLine(flag.stderr)).toMatch(/^idemkit stats: Unknown option '--bogus'/);
    const scope = await inProcess(['inspect', 'k', '--store', 'sqlite:/nonexistent/x.db']);
    expect(scope.code).toBe(2);
    expect(oneLine(scope.stderr)).toMatch(/--scope is required/);
  });

  it('refuses flags a command or store does not take, and shows each command its help', async () => {
    const help = await inProcess(['purge', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: idemkit purge KEY --scope SCOPE --store URL --yes \[--force\]/);
    expect(help.stdout).toMatch(/Exit codes: 0 done · 1 not found, or refused/);
    const cases: Array<[string[], RegExp]> = [
      [['reap', '--older-than', '5m'], /^idemkit reap: --older-than does not apply to idemkit reap$/m],
      [['reap', '--limit', '0'], /^idemkit reap: --limit: expected a whole number >= 1, got "0"$/m],
      [['list', '--state', 'done'], /^idemkit list: --state: expected in_flight or completed, got "done"$/m],
      [['stats', '--table', 't', '--store', 'redis://127.0.0.1:1'], /^idemkit stats: --table does not apply to a redis store$/m],
      [['list', '--table', 'x; drop', '--store', 'sqlite:/nonexistent.db'], /^idemkit list: --table: expected a plain SQL identifier, got "x; drop"$/m],
      [['list', '--table', 'x; drop', '--store', 'postgres://127.0.0.1:1/x'], /^idemkit list: --table: expected a plain lower-case SQL identifier/m],
      [['frobnicate'], /^idemkit: unknown command "frobnicate"/],
      [['frob\x1b]0;x\x07'], /^idemkit: unknown command "frob\\u001b\]0;x\\u0007"$/m],
    ];
    for (const [args, message] of cases) {
      const run = await inProcess([...args, ...(args.includes('--store') || args[0] === 'frobnicate' ? [] : ['--store', 'sqlite:/nonexistent.db'])]);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toMatch(message);
    }
  });

  it('says a SQLite file does not exist rather than creating it (only migrate creates)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idemkit-cli-'));
    try {
      const run = await inProcess(['list', '--store', `sqlite:${join(dir, 'none.db')}`]);
      expect(run.code).toBe(2);
      expect(oneLine(run.stderr)).toMatch(/no SQLite database at .*none\.db \(run `idemkit migrate` to create it\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // Port 1: nothing listens there, so the connection is refused at once.
  for (const [store, url] of [
    ['PostgreSQL', 'postgres://admin:s3cret@127.0.0.1:1/test'],
    ['MySQL', 'mysql://admin:s3cret@127.0.0.1:1/test'],
    ['Redis', 'redis://:s3cret@127.0.0.1:1'],
  ] as const) {
    it(`says an unreachable ${store} cannot be reached, without its password`, async () => {
      const run = await runCli(['stats', '--store', url]);
      expect(run.code).toBe(2);
      const line = oneLine(run.stderr);
      expect(line).toMatch(/^idemkit stats: cannot reach the store at \S+127\.0\.0\.1:1\S*: .*ECONNREFUSED/);
      expect(run.stderr).not.toContain('s3cret');
    });
  }

  // The other credential forms the drivers read: a password= query parameter, a Redis user name
  // with its password; shown as ***, in this process (as the executable runs it).
  for (const [url, shown] of [
    ['postgres://admin@127.0.0.1:1/test?password=s3cretQ&sslpassword=s3cretR', 'postgres://admin@127.0.0.1:1/test?password=***&sslpassword=***'],
    ['mysql://admin@127.0.0.1:1/test?password=s3cretQ', 'mysql://admin@127.0.0.1:1/test?password=***'],
    ['redis://admin:s3cretQ@127.0.0.1:1', 'redis://admin:***@127.0.0.1:1'],
    ['redis://127.0.0.1:1?password=s3cretQ', 'redis://127.0.0.1:1?password=***'],
  ] as const) {
    it(`says ${shown} cannot be reached, without its password`, async () => {
      const run = await inProcess(['stats', '--store', url]);
      expect(run.code).toBe(2);
      expect(oneLine(run.stderr)).toMatch(new RegExp(`^idemkit stats: cannot reach the store at ${shown.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: `));
      expect(run.stderr).not.toContain('s3cret');
    });
  }

  it('refuses a URL with an unencoded / in its password, showing only the scheme', async () => {
    const run = await inProcess(['stats', '--store', 'postgres://admin:s3c/retQ@127.0.0.1:1/test']);
    expect(run.code).toBe(2);
    expect(oneLine(run.stderr)).toMatch(/^idemkit stats: the store URL "postgres:\/\/…" is not a valid URL .*%2F/);
    expect(run.stderr).not.toMatch(/s3c|retQ/);
  });
});

/**
 * Keys, scopes, recovery points, headers and bodies are chosen by clients: one that echoes
 * `ESC]0;…BEL` (terminal title), `ESC[2K ESC[1A` (erase and move up: fake lines), OSC 52 (the
 * clipboard) or a C1 CSI must reach the operator's terminal as text, in every human-readable
 * output and in JSON (which stays the same value).
 */
const ESCAPES = '\x1b]0;pwned\x07\x1b[2K\x1b[1A\x1b]52;c;cHduZWQ=\x07\x9b2J\u202e\x7f';
/** What a terminal acts on: C0 but the newline between lines, DEL, C1, a bidi override. */
const RAW_CONTROL = /[^\P{Cc}\n]|\u202e/u;

function hostileRecords(label: string, skip: boolean, open: () => Promise<{ args: string[]; store: IdempotencyStore; close(): Promise<void> }>) {
  it.skipIf(skip)(`inspect, list, stats and their errors on ${label} print stored control characters escaped`, async () => {
    const t = await open();
    try {
      const scope = `s-${randomBytes(3).toString('hex')}${ESCAPES}`;
      const key = `k${ESCAPES}`;
      const done = await t.store.claim({ scope, key }, `fp${ESCAPES}`, LIVE);
      if (done.kind !== 'acquired') throw new Error(done.kind);
      // A body that echoes the sequences, then fakes a line of inspect's own output.
      const body = `echo ${ESCAPES}\nstate        completed\r`;
      await t.store.complete({ scope, key }, done.token, { status: 200, headers: [['x-echo', `v${ESCAPES}`]], body: new TextEncoder().encode(body), bodyOmitted: false });
      const running = await t.store.claim({ scope, key: `r${ESCAPES}` }, 'fp', LIVE);
      if (running.kind !== 'acquired') throw new Error(running.kind);
      await t.store.checkpoint({ scope, key: `r${ESCAPES}` }, running.token, `charged${ESCAPES}`, { note: ESCAPES });

      const runs = {
        inspect: await runCli(['inspect', key, '--scope', scope, ...t.args]),
        inspectRunning: await inProcess(['inspect', `r${ESCAPES}`, '--scope', scope, ...t.args]),
        list: await inProcess(['list', '--scope', scope, ...t.args]),
        stats: await inProcess(['stats', ...t.args]),
        missing: await inProcess(['inspect', `nope${ESCAPES}`, '--scope', scope, ...t.args]),
      };
      for (const [name, run] of Object.entries(runs)) {
        expect(run.stdout, name).not.toMatch(RAW_CONTROL);
        expect(run.stderr, name).not.toMatch(RAW_CONTROL);
      }
      const text = runs.inspect.stdout;
      expect(runs.inspect.code).toBe(0);
      expect(text).toMatch(/^key\s+"k\\u001b\]0;pwned\\u0007\\u001b\[2K\\u001b\[1A\\u001b\]52;c;cHduZWQ=\\u0007\\x9b2J\\u202e\\x7f"$/m);
      expect(text).toContain('fingerprint  fp\\x1b]0;pwned\\x07');
      expect(text).toContain('x-echo: v\\x1b]0;pwned\\x07');
      // The body on one line, its newline shown as \n: no faked `state` line.
      expect(text).toMatch(/^body\s+\d+ bytes, text: echo \\x1b\]0;pwned\\x07\\x1b\[2K\\x1b\[1A\\x1b\]52;c;cHduZWQ=\\x07\\x9b2J\\u202e\\x7f\\nstate {8}completed\\r$/m);
      expect(text.match(/^state/gm)).toHaveLength(1);
      expect(runs.inspectRunning.stdout).toMatch(/^recovery\s+charged\\x1b\]0;pwned\\x07.*\\x7f \{"note":"\\u001b\]0;pwned\\u0007.*\\u202e\\u007f"\}$/m);
      expect(runs.list.stdout).toContain('"k\\u001b]0;pwned\\u0007');
      expect(runs.list.stdout).toContain('charged\\x1b]0;pwned\\x07');
      expect(runs.stats.stdout).toMatch(/^oldest in flight\s+key "r\\u001b\]0;pwned/m);
      expect(runs.missing.code).toBe(1);
      expect(runs.missing.stderr).toContain('no record for key "nope\\u001b]0;pwned\\u0007');
      expect(runs.missing.stderr).toContain('\\x9b2J');

      // JSON: no raw control character, and the same value as stored.
      const json = await inProcess(['inspect', key, '--scope', scope, '--json', ...t.args]);
      expect(json.stdout).not.toMatch(RAW_CONTROL);
      const parsed = JSON.parse(json.stdout) as { key: string; scope: string; fingerprint: string; response: { headers: string[][]; body: { preview: string } } };
      expect(parsed).toMatchObject({ key, scope, fingerprint: `fp${ESCAPES}` });
      expect(parsed.response.headers).toEqual([['x-echo', `v${ESCAPES}`]]);
      expect(parsed.response.body.preview).toBe(body);
      const listed = await inProcess(['list', '--json', '--scope', scope, ...t.args]);
      expect(listed.stdout).not.toMatch(RAW_CONTROL);
      expect((JSON.parse(listed.stdout) as { records: Array<{ recoveryPoint: string | null }> }).records.map((r) => r.recoveryPoint)).toContain(`charged${ESCAPES}`);
    } finally {
      await t.close();
    }
  });
}

describe('idemkit store commands: stored control characters never reach the terminal raw', () => {
  hostileRecords('SQLite', false, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idemkit-cli-'));
    const file = join(dir, 'records.db');
    const table = name();
    const db = new Database(file);
    return {
      args: ['--store', `sqlite:${file}`, '--table', table],
      store: sqliteStore({ database: db, table }),
      close: async () => {
        db.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  });

  hostileRecords('PostgreSQL', !pgUp, async () => {
    const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
    pool.on('error', () => {});
    const table = name();
    const store = postgresStore({ pool, table });
    await store.migrate();
    return {
      args: ['--store', PG_URL, '--table', table],
      store,
      close: async () => {
        await pool.query(`DROP FUNCTION IF EXISTS "public"."${table}_claim"; DROP TABLE IF EXISTS "public"."${table}"`);
        await pool.end();
      },
    };
  });

  it('escapes what an error message echoes (a flag value with a C1 control)', async () => {
    const run = await inProcess(['list', '--table', 'x\x9b2Jy', '--store', 'sqlite:/nonexistent.db']);
    expect(run.code).toBe(2);
    expect(run.stderr).not.toMatch(RAW_CONTROL);
    expect(run.stderr).toMatch(/^idemkit list: --table: expected a plain SQL identifier, got "x\\x9b2Jy"$/m);
  });
});
