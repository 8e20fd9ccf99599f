/**
 * The floors (issue 29): idemkit's PostgreSQL and SQLite stores against a raw loop of the very
 * statements they send, measured in one run. `npm run bench:floors` runs it alone (and writes its
 * section of bench/RESULTS.md and bench/results/floors.json); `npm run bench` runs it as a part.
 *
 * - PostgreSQL: the store's `claim` + `complete` of new keys (and `claim` of completed keys) with
 *   as many requests in flight as the HTTP bench has connections, through a `pg.Pool` opened as
 *   the bench server opens it, against the same statements sent through the same pool by a loop
 *   that does nothing else. The statements are captured from the store (its pool's `query`), so
 *   the floor is what the store sends, not what someone thinks it sends.
 * - SQLite: the time inside the store's calls, in-process and in the bench server under load,
 *   against a synchronous better-sqlite3 loop of the statements captured from the store's
 *   Database (its prepared statements' `get`/`run`/`all`).
 *
 * Knobs: BENCH_RUNS (repetitions, 5), BENCH_DURATION (s per side and repetition, 2), BENCH_WARMUP,
 * BENCH_RAW_ITERATIONS (SQLite requests per side and repetition), BENCH_STORES (postgres, sqlite),
 * --quick.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import pg from 'pg';
import { fingerprint } from 'idemkit/kit';
import type { StoredResponse } from 'idemkit/kit';
import { postgresStore } from 'idemkit/stores/postgres';
import { sqliteStore } from 'idemkit/stores/sqlite';
import type { CapturedText, FloorResults, FloorWorkload, Fresh, Marks, PgFloor, PgWorkloadFloor, SqliteFloor, SqliteWorkloadFloor } from './floors-report.js';
import { describeValues, floorTargets, floorsSection, replaceSection, templateOf } from './floors-report.js';
import { CONNECTIONS, nonce, post, replayKeys, runLoad, startServer, waitForQuiet } from './harness.js';
import { readBenchOptions } from './options.js';
import type { ServerStore } from './options.js';
import { gitHead, srcHash } from './provenance.js';
import { BODY, CONTENT_TYPE, REPLAY_KEYS, ROUTE, median } from './shared.js';
import { POSTGRES_URL } from './stores.js';

/** The bench server's pool size (bench/stores.ts): the store is measured as the HTTP bench runs it. */
const POOL_MAX = 10;
const APPLICATION = `idemkit-floors-${process.pid}`;
const CLAIM = { leaseMs: 30_000, windowMs: 86_400_000 };
const FACTS = { method: 'POST', path: ROUTE, contentType: CONTENT_TYPE, body: Buffer.from(BODY) };
const FP = fingerprint(FACTS);
const RESPONSE: StoredResponse = {
  status: 201,
  headers: [['content-type', 'application/json; charset=utf-8']],
  body: Buffer.from(JSON.stringify({ id: randomUUID(), ok: true })),
  bodyOmitted: false,
};

export interface FloorOptions {
  readonly stores: readonly ServerStore[];
  readonly repetitions: number;
  readonly durationSec: number;
  readonly warmupSec: number;
  readonly iterations: number;
  readonly noiseLimit: number;
  readonly quietWaitMs: number;
  readonly command: string;
  readonly log: (line: string) => void;
}

/** Keys of one length on both sides, so neither sends more bytes. */
let keyCounter = 0;
const keyOf = (side: 's' | 'r') => `floor-${side}-${nonce}-${(keyCounter++).toString(36).padStart(8, '0')}`;
/** The raw loop's owner tokens: as long as the store's (32 hex), made by a counter. */
let tokenCounter = 0;
const rawToken = () => (tokenCounter++).toString(16).padStart(32, '0');

// ---------------------------------------------------------------- PostgreSQL

interface PgStatement {
  readonly text: string;
  readonly name?: string;
  readonly build: (fresh: Fresh) => unknown;
  /** What the store's call returned: the raw loop checks each answer against it. */
  readonly rowCount: number | null;
  readonly rows: number;
}

/** What one side did during its slices: requests, wall time and this process's CPU time. */
interface Tally {
  requests: number;
  wallMs: number;
  cpuMicros: number;
  /** CPU time of the database server processes serving this side (PostgreSQL's backends of the pool). */
  serverMicros: number;
}
const tally = (): Tally => ({ requests: 0, wallMs: 0, cpuMicros: 0, serverMicros: 0 });

/** CPU µs used so far by these processes, from /proc (0 off Linux or for a process gone). */
function processesMicros(pids: readonly number[]): number {
  let total = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      total += (Number(fields[11]) + Number(fields[12])) * 10_000; // utime + stime, USER_HZ = 100
    } catch {
      // gone, or no /proc
    }
  }
  return total;
}

/** `concurrency` workers in flight at once, each running `op` until the time is up, added to `into`. */
async function closedLoop(concurrency: number, seconds: number, op: () => Promise<void>, into: Tally = tally(), serverPids: readonly number[] = []): Promise<Tally> {
  const deadline = performance.now() + seconds * 1e3;
  let done = 0;
  const server = processesMicros(serverPids);
  const cpu = process.cpuUsage();
  const started = performance.now();
  const worker = async () => {
    while (performance.now() < deadline) {
      await op();
      done++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const used = process.cpuUsage(cpu);
  into.wallMs += performance.now() - started;
  into.serverMicros += processesMicros(serverPids) - server;
  into.requests += done;
  into.cpuMicros += used.user + used.system;
  return into;
}

/**
 * One repetition: each side runs for `seconds` in all, in slices that alternate (A B B A …), so a
 * machine whose load moves (other agents' test runs share it) weighs on both sides alike.
 */
async function alternating(
  concurrency: number,
  seconds: number,
  a: () => Promise<void>,
  b: () => Promise<void>,
  first: 'a' | 'b',
  serverPids: readonly number[],
): Promise<{ a: Tally; b: Tally }> {
  const slices = Math.max(1, Math.round(seconds / SLICE_SEC));
  const out = { a: tally(), b: tally() };
  for (let i = 0; i < slices; i++) {
    const order = (i % 2 === 0) === (first === 'a') ? (['a', 'b'] as const) : (['b', 'a'] as const);
    for (const side of order) await closedLoop(concurrency, seconds / slices, side === 'a' ? a : b, out[side], serverPids);
  }
  return out;
}
const SLICE_SEC = 0.5;
/** SQLite: requests per block; the two sides' blocks alternate. */
const BLOCK = 250;

async function measurePostgres(o: FloorOptions): Promise<{ floor: PgFloor; version: string }> {
  // Named, so its backends can be found (their CPU time is read from /proc); never closed when
  // idle, so the backends found stay the ones serving it. Neither changes what a query costs.
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: POOL_MAX, application_name: APPLICATION, idleTimeoutMillis: 0 });
  pool.on('error', () => {});
  const table = `bench_floors_${process.pid}`;
  const sent: Array<{ text: string; name?: string; values: unknown; result: Promise<pg.QueryResult> }> = [];
  let capturing = false;
  const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<pg.QueryResult>;
  // The store's own pool, seen through its `query`: what it sends is what the floor sends.
  const recording = {
    query: (...args: unknown[]) => {
      const result = query(...args);
      if (capturing) {
        const [first, second] = args;
        const config = typeof first === 'string' ? { text: first, values: second } : (first as { text: string; name?: string; values?: unknown });
        sent.push({ text: config.text, name: config.name, values: config.values, result });
      }
      return result;
    },
    connect: () => pool.connect(),
  } as unknown as pg.Pool;
  try {
    const version = ((await pool.query('SELECT version() AS v')).rows[0] as { v: string }).v.split(' on ')[0]!;
    const probe = postgresStore({ pool: recording, table });
    await probe.migrate();
    const store = postgresStore({ pool, table });
    for (const key of replayKeys) {
      const c = await store.claim({ scope: '', key }, FP, CLAIM);
      if (c.kind === 'acquired') await store.complete({ scope: '', key }, c.token, RESPONSE);
    }

    const capture = async (workload: FloorWorkload): Promise<{ statements: PgStatement[]; texts: CapturedText[] }> => {
      sent.length = 0;
      const key = workload === 'new-key' ? keyOf('s') : replayKeys[0]!;
      const time = Date.now();
      capturing = true;
      let token: string | undefined;
      try {
        const c = await probe.claim({ scope: '', key }, FP, CLAIM);
        if (workload === 'new-key') {
          if (c.kind !== 'acquired') throw new Error(`floors: expected a new claim, got ${c.kind}`);
          token = c.token;
          await probe.complete({ scope: '', key }, c.token, RESPONSE);
        } else if (c.kind !== 'completed') throw new Error(`floors: expected a replay, got ${c.kind}`);
      } finally {
        capturing = false;
      }
      const marks: Marks = { key, token, time };
      const statements: PgStatement[] = [];
      for (const s of sent) {
        const result = await s.result;
        statements.push({ text: s.text, name: s.name, build: templateOf(s.values, marks), rowCount: result.rowCount, rows: result.rows.length });
      }
      const texts = sent.map((s) => ({ workload, text: s.text.replace(/\s+/g, ' ').trim(), values: describeValues(s.values as unknown[]) }));
      return { statements, texts };
    };

    const storeOp = (workload: FloorWorkload): (() => Promise<void>) => {
      let i = 0;
      if (workload === 'replay') {
        return async () => {
          const c = await store.claim({ scope: '', key: replayKeys[i++ % REPLAY_KEYS]! }, FP, CLAIM);
          if (c.kind !== 'completed') throw new Error(`floors: expected a replay, got ${c.kind}`);
        };
      }
      return async () => {
        const ref = { scope: '', key: keyOf('s') };
        const c = await store.claim(ref, FP, CLAIM);
        if (c.kind !== 'acquired') throw new Error(`floors: expected a new claim, got ${c.kind}`);
        await store.complete(ref, c.token, RESPONSE);
      };
    };
    const rawOp = (workload: FloorWorkload, statements: readonly PgStatement[]): (() => Promise<void>) => {
      let i = 0;
      return async () => {
        const fresh: Fresh = { key: workload === 'replay' ? replayKeys[i++ % REPLAY_KEYS]! : keyOf('r'), token: rawToken(), timeShift: 0 };
        for (const s of statements) {
          const values = s.build(fresh) as unknown[];
          const result = await (s.name === undefined ? pool.query(s.text, values) : pool.query({ name: s.name, text: s.text, values }));
          if (result.rowCount !== s.rowCount || result.rows.length !== s.rows) {
            throw new Error(`floors: the raw loop's statement answered ${result.rowCount} rows where the store's answered ${s.rowCount}`);
          }
        }
      };
    };

    const workloads: PgWorkloadFloor[] = [];
    const captured: CapturedText[] = [];
    for (const workload of ['new-key', 'replay'] as const) {
      const { statements, texts } = await capture(workload);
      captured.push(...texts);
      const sides = { store: storeOp(workload), raw: rawOp(workload, statements) };
      await closedLoop(CONNECTIONS, o.warmupSec, sides.store);
      await closedLoop(CONNECTIONS, o.warmupSec, sides.raw);
      const storeRps: number[] = [];
      const rawRps: number[] = [];
      const storeCpu: number[] = [];
      const rawCpu: number[] = [];
      const storeServer: number[] = [];
      const rawServer: number[] = [];
      for (let r = 0; r < o.repetitions; r++) {
        await waitForQuiet(o.noiseLimit, o.quietWaitMs, o.log);
        const pids = ((await pool.query('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [APPLICATION])).rows as Array<{ pid: number }>).map((row) => row.pid);
        const got = await alternating(CONNECTIONS, o.durationSec, sides.store, sides.raw, r % 2 === 0 ? 'a' : 'b', pids);
        storeRps.push(got.a.requests / (got.a.wallMs / 1e3));
        rawRps.push(got.b.requests / (got.b.wallMs / 1e3));
        storeCpu.push(got.a.cpuMicros / got.a.requests);
        rawCpu.push(got.b.cpuMicros / got.b.requests);
        storeServer.push(got.a.serverMicros / got.a.requests);
        rawServer.push(got.b.serverMicros / got.b.requests);
        o.log(
          `  postgres ${workload} ${r + 1}: idemkit ${Math.round(storeRps.at(-1)!)} req/s, raw ${Math.round(rawRps.at(-1)!)} req/s, ratio ${(storeRps.at(-1)! / rawRps.at(-1)!).toFixed(3)}; ` +
            `client CPU ${storeCpu.at(-1)!.toFixed(1)} against ${rawCpu.at(-1)!.toFixed(1)} µs/req, ` +
            `PostgreSQL CPU ${storeServer.at(-1)!.toFixed(1)} against ${rawServer.at(-1)!.toFixed(1)} µs/req (${pids.length} backends)`,
        );
      }
      workloads.push({ workload, statements: statements.length, storeRps, rawRps, storeCpuMicros: storeCpu, rawCpuMicros: rawCpu, storeServerMicros: storeServer, rawServerMicros: rawServer });
    }
    return { floor: { concurrency: CONNECTIONS, poolMax: POOL_MAX, durationSec: o.durationSec, warmupSec: o.warmupSec, captured, workloads }, version };
  } finally {
    await pool.query(`DROP TABLE IF EXISTS ${table} CASCADE; DROP FUNCTION IF EXISTS ${table}_claim CASCADE`).catch(() => {});
    await pool.end();
  }
}

// ---------------------------------------------------------------- SQLite

type Method = 'run' | 'get' | 'all' | 'exec';
interface LiteCall {
  readonly sql: string;
  readonly method: Method;
  readonly args: readonly unknown[];
  /** What the call returned, to check the raw loop's answers: rows, or changes. */
  readonly outcome: number;
}

const outcomeOf = (method: Method, result: unknown): number =>
  method === 'run' ? Number((result as { changes: number }).changes) : method === 'get' ? (result === undefined ? 0 : 1) : method === 'all' ? (result as unknown[]).length : 0;

/** `db` seen through its prepared statements: each `run`/`get`/`all` (and `exec`) while `on`. */
function recordingDatabase(db: Database.Database): { database: Database.Database; calls: LiteCall[]; record(on: boolean): void } {
  const calls: LiteCall[] = [];
  let on = false;
  const statement = (target: Database.Statement, sql: string) =>
    new Proxy(target, {
      get(t, p) {
        const value = Reflect.get(t, p, t) as unknown;
        if (typeof value !== 'function') return value;
        if (p === 'run' || p === 'get' || p === 'all') {
          return (...args: unknown[]) => {
            const result = (value as (...a: unknown[]) => unknown).apply(t, args);
            if (on) calls.push({ sql, method: p, args, outcome: outcomeOf(p, result) });
            return result;
          };
        }
        return (value as (...a: unknown[]) => unknown).bind(t);
      },
    });
  const database = new Proxy(db, {
    get(t, p) {
      const value = Reflect.get(t, p, t) as unknown;
      if (typeof value !== 'function' || p === 'constructor') return value;
      if (p === 'prepare') return (sql: string) => statement(t.prepare(sql), sql);
      if (p === 'exec') {
        return (sql: string) => {
          if (on) calls.push({ sql, method: 'exec', args: [], outcome: 0 });
          return t.exec(sql);
        };
      }
      return (value as (...a: unknown[]) => unknown).bind(t);
    },
  });
  return { database, calls, record: (v) => void (on = v) };
}

interface LiteStatement {
  readonly method: Method;
  readonly statement?: Database.Statement;
  readonly sql: string;
  readonly build: (fresh: Fresh) => unknown;
  readonly outcome: number;
}

async function measureSqlite(o: FloorOptions): Promise<SqliteFloor> {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-floors-'));
  const open = (name: string) => new Database(join(dir, name));
  const databases: Database.Database[] = [];
  try {
    const probeDb = open('capture.db');
    const storeDb = open('store.db');
    const rawDb = open('raw.db');
    databases.push(probeDb, storeDb, rawDb);
    const recorder = recordingDatabase(probeDb);
    const probe = sqliteStore({ database: recorder.database });
    const store = sqliteStore({ database: storeDb }); // WAL, synchronous = NORMAL
    // The raw loop's file gets the same table, indexes and pragmas, made by the store itself.
    const rawSeed = sqliteStore({ database: rawDb });
    for (const s of [probe, store, rawSeed]) {
      for (const key of replayKeys) {
        const c = await s.claim({ scope: '', key }, FP, CLAIM);
        if (c.kind === 'acquired') await s.complete({ scope: '', key }, c.token, RESPONSE);
      }
    }
    const prepared = new Map<string, Database.Statement>();
    const capture = async (workload: FloorWorkload): Promise<{ statements: LiteStatement[]; texts: CapturedText[] }> => {
      recorder.calls.length = 0;
      const key = workload === 'new-key' ? keyOf('s') : replayKeys[0]!;
      const time = Date.now();
      let token: string | undefined;
      recorder.record(true);
      try {
        const c = await probe.claim({ scope: '', key }, FP, CLAIM);
        if (workload === 'new-key') {
          if (c.kind !== 'acquired') throw new Error(`floors: expected a new claim, got ${c.kind}`);
          token = c.token;
          await probe.complete({ scope: '', key }, c.token, RESPONSE);
        } else if (c.kind !== 'completed') throw new Error(`floors: expected a replay, got ${c.kind}`);
      } finally {
        recorder.record(false);
      }
      const marks: Marks = { key, token, time };
      const statements = recorder.calls.map((call): LiteStatement => {
        let statement: Database.Statement | undefined;
        if (call.method !== 'exec') {
          statement = prepared.get(call.sql);
          if (statement === undefined) prepared.set(call.sql, (statement = rawDb.prepare(call.sql)));
        }
        return { method: call.method, statement, sql: call.sql, build: templateOf(call.args, marks), outcome: call.outcome };
      });
      const texts = recorder.calls.map((c) => ({
        workload,
        text: `${c.method}: ${c.sql.replace(/\s+/g, ' ').trim()}`,
        values: c.args.length === 1 && c.args[0] !== null && typeof c.args[0] === 'object' && !Buffer.isBuffer(c.args[0]) ? describeValues(c.args[0] as Record<string, unknown>) : describeValues(c.args),
      }));
      return { statements, texts };
    };

    /** Wall µs inside the store's calls (what the bench server times), and this process's CPU µs for the whole block. */
    const storeSide = async (workload: FloorWorkload, keys: readonly string[], into: Tally): Promise<void> => {
      let inside = 0;
      const cpu = process.cpuUsage();
      for (const key of keys) {
        const ref = { scope: '', key };
        let t = performance.now();
        const claim = store.claim(ref, FP, CLAIM);
        inside += performance.now() - t;
        const c = await claim;
        if (workload === 'replay') {
          if (c.kind !== 'completed') throw new Error(`floors: expected a replay, got ${c.kind}`);
          continue;
        }
        if (c.kind !== 'acquired') throw new Error(`floors: expected a new claim, got ${c.kind}`);
        t = performance.now();
        const done = store.complete(ref, c.token, RESPONSE);
        inside += performance.now() - t;
        await done;
      }
      const used = process.cpuUsage(cpu);
      into.requests += keys.length;
      into.wallMs += inside;
      into.cpuMicros += used.user + used.system;
    };
    /** The captured statements run back to back: wall and CPU µs. */
    const rawSide = (statements: readonly LiteStatement[], keys: readonly string[], time: number, into: Tally): void => {
      const cpu = process.cpuUsage();
      const started = performance.now();
      for (const key of keys) {
        const fresh: Fresh = { key, token: rawToken(), timeShift: Date.now() - time };
        for (const s of statements) {
          const args = s.build(fresh) as unknown[];
          let outcome: number;
          if (s.method === 'exec') {
            rawDb.exec(s.sql);
            outcome = 0;
          } else {
            outcome = outcomeOf(s.method, (s.statement![s.method] as (...a: unknown[]) => unknown)(...args));
          }
          if (outcome !== s.outcome) throw new Error(`floors: the raw loop's ${s.method} answered ${outcome} where the store's answered ${s.outcome}`);
        }
      }
      const used = process.cpuUsage(cpu);
      into.wallMs += performance.now() - started;
      into.requests += keys.length;
      into.cpuMicros += used.user + used.system;
    };

    const keysFor = (workload: FloorWorkload, side: 's' | 'r', n: number) =>
      Array.from({ length: n }, (_, i) => (workload === 'replay' ? replayKeys[i % REPLAY_KEYS]! : keyOf(side)));
    const workloads: Array<{ -readonly [K in keyof SqliteWorkloadFloor]: SqliteWorkloadFloor[K] }> = [];
    const captured: CapturedText[] = [];
    for (const workload of ['new-key', 'replay'] as const) {
      const captureTime = Date.now();
      const { statements, texts } = await capture(workload);
      captured.push(...texts);
      const warm = Math.max(1_000, o.iterations >> 2);
      await storeSide(workload, keysFor(workload, 's', warm), tally());
      rawSide(statements, keysFor(workload, 'r', warm), captureTime, tally());
      const storeMicros: number[] = [];
      const rawMicros: number[] = [];
      const storeCpuMicros: number[] = [];
      const rawCpuMicros: number[] = [];
      for (let r = 0; r < o.repetitions; r++) {
        // Blocks of BLOCK requests, alternating (A B B A …), so the machine's load weighs on both sides alike.
        const st = tally();
        const raw = tally();
        for (let i = 0, blocks = Math.max(1, Math.round(o.iterations / BLOCK)); i < blocks; i++) {
          const storeFirst = (i % 2 === 0) === (r % 2 === 0);
          const storeKeys = keysFor(workload, 's', BLOCK);
          const rawKeys = keysFor(workload, 'r', BLOCK);
          if (storeFirst) await storeSide(workload, storeKeys, st);
          rawSide(statements, rawKeys, captureTime, raw);
          if (!storeFirst) await storeSide(workload, storeKeys, st);
        }
        storeMicros.push((st.wallMs * 1e3) / st.requests);
        rawMicros.push((raw.wallMs * 1e3) / raw.requests);
        storeCpuMicros.push(st.cpuMicros / st.requests);
        rawCpuMicros.push(raw.cpuMicros / raw.requests);
        o.log(
          `  sqlite ${workload} ${r + 1}: store ${storeMicros.at(-1)!.toFixed(2)} µs, raw ${rawMicros.at(-1)!.toFixed(2)} µs, ratio ${(storeMicros.at(-1)! / rawMicros.at(-1)!).toFixed(3)}; ` +
            `CPU ${storeCpuMicros.at(-1)!.toFixed(2)} against ${rawCpuMicros.at(-1)!.toFixed(2)} µs, ratio ${(storeCpuMicros.at(-1)! / rawCpuMicros.at(-1)!).toFixed(3)}`,
        );
      }
      workloads.push({ workload, statements: statements.length, storeMicros, rawMicros, storeCpuMicros, rawCpuMicros });
    }

    // The same calls timed inside the bench server under load (bench/server.ts's store timing).
    const server = await startServer({ impl: 'idemkit', framework: 'fastify', store: 'sqlite', delayMs: 0, required: true, nonce });
    try {
      const first = await post(server.url, keyOf('s'));
      if (first.status !== 201) throw new Error(`floors: the SQLite bench server answered ${first.status} to a new key`);
      for (const key of replayKeys) await post(server.url, key);
      for (const w of workloads) {
        await runLoad(server, w.workload, o.warmupSec);
        const inServer: number[] = [];
        for (let r = 0; r < o.repetitions; r++) {
          await waitForQuiet(o.noiseLimit, o.quietWaitMs, o.log);
          await server.timeStore(true);
          try {
            const before = (await server.stats()).storeMicros;
            const s = await runLoad(server, w.workload, o.durationSec);
            const after = (await server.stats()).storeMicros;
            if (s.non2xx > 0 || s.errors > 0) throw new Error(`floors: the SQLite bench server answered ${s.non2xx} non-2xx, ${s.errors} errors`);
            inServer.push((after - before) / s.completed);
          } finally {
            await server.timeStore(false);
          }
          o.log(`  sqlite ${w.workload} in the server ${r + 1}: ${inServer.at(-1)!.toFixed(2)} µs (raw loop ${median(w.rawMicros).toFixed(2)} µs)`);
        }
        w.inServerMicros = inServer;
      }
    } finally {
      await server.stop();
    }
    return { iterations: o.iterations, captured, framework: 'fastify', workloads };
  } finally {
    for (const db of databases) db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The floors of the selected stores (PostgreSQL, SQLite), in one run. */
export async function measureFloors(o: FloorOptions): Promise<FloorResults | undefined> {
  const pgSelected = o.stores.includes('postgres');
  const liteSelected = o.stores.includes('sqlite');
  if (!pgSelected && !liteSelected) return undefined;
  o.log(`floors: ${[pgSelected && `PostgreSQL at ${CONNECTIONS} in flight`, liteSelected && 'SQLite'].filter(Boolean).join(', ')}; ${o.repetitions} repetitions…`);
  const head = gitHead();
  const src = srcHash();
  const pgResult = pgSelected ? await measurePostgres(o) : undefined;
  const sqlite = liteSelected ? await measureSqlite(o) : undefined;
  const require = createRequire(import.meta.url);
  return {
    date: new Date().toISOString(),
    node: process.version,
    commit: `${head}, src sha256 ${src}` + (srcHash() === src ? '' : ` (src/ changed during the run, to ${srcHash()})`),
    command: o.command,
    repetitions: o.repetitions,
    postgres: pgResult?.floor,
    sqlite,
    postgresVersion: pgResult?.version,
    betterSqliteVersion: liteSelected ? (require('better-sqlite3/package.json') as { version: string }).version : undefined,
  };
}

const RESULTS_MD = new URL('./RESULTS.md', import.meta.url);

/** Writes bench/results/floors.json and the floors section of bench/RESULTS.md. */
export function writeFloors(results: FloorResults): string {
  const dir = new URL('./results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  writeFileSync(new URL('floors.json', dir), `${JSON.stringify(results, null, 2)}\n`);
  let text = '';
  try {
    text = readFileSync(RESULTS_MD, 'utf8');
  } catch {
    // no report yet
  }
  const section = floorsSection(results);
  writeFileSync(RESULTS_MD, replaceSection(text, 'floors', section));
  return section;
}

async function main(): Promise<void> {
  const options = readBenchOptions();
  const log = (line: string) => process.stderr.write(`${line}\n`);
  const command = `${Object.entries(process.env)
    .filter(([k]) => k.startsWith('BENCH_'))
    .map(([k, v]) => `${k}=${v} `)
    .join('')}npm run bench:floors${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`;
  const results = await measureFloors({
    stores: options.stores,
    repetitions: options.runs,
    durationSec: options.durationSec,
    warmupSec: options.warmupSec,
    iterations: options.rawIterations,
    noiseLimit: options.noiseLimit,
    quietWaitMs: options.quietWaitMs,
    command,
    log,
  });
  if (results === undefined) {
    log('floors: neither postgres nor sqlite is in BENCH_STORES: nothing to measure');
    return;
  }
  const section = writeFloors(results);
  process.stdout.write(`\n${section}\n`);
  for (const t of floorTargets(results)) log(`${t.ok ? 'PASS' : 'FAIL'} ${t.text}`);
  log('written: bench/RESULTS.md (floors section), bench/results/floors.json');
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
