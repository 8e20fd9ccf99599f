/**
 * Issue 26 item 15: SQLite has one writer per file. A long transactional handler holds it, and a
 * request with another key queues behind it; past `storeTimeoutMs` that request is answered 503
 * `store-busy` with a Retry-After from the holder's time so far, and the log line says the SQLite
 * writer is busy and names the option to tune (it used to be a bare `store-unavailable` blaming
 * `storeTimeoutMs`). And the duplicates of a running request: SQLite in transactional mode queues
 * them behind the writer, so they replay the answer, where the other stores answer 409 at once.
 *
 * Real better-sqlite3 on a temporary file, real concurrency through the Web adapter; handlers are
 * held on promises and the store's clock is moved by hand: no wall-clock thresholds.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreBusyError } from '../../src/core/errors.js';
import { resolveOptions } from '../../src/core/options.js';
import { withIdempotency } from '../../src/http/web.js';
import { instrumentStore } from '../../src/otel/index.js';
import { TRANSACTION_JOIN } from '../../src/stores/shared/joined-transaction.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import type { SqliteStore } from '../../src/stores/sqlite/index.js';
import { sqliteFile } from '../support/sqlite-file.js';
import type { SqliteFile } from '../support/sqlite-file.js';
import { manualClock } from './manual-clock.js';
import { latch, recordingLogger } from '../support/recording.js';

/** Lets every callback queued so far run (turns of the event loop), without a timer. */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
}

/** Turns the event loop until `done()` holds; fails (never gives up silently) after `max` turns. */
async function until(done: () => Promise<boolean> | boolean, max = 1_000): Promise<void> {
  for (let i = 0; i < max; i++) {
    if (await done()) return;
    await turns(1);
  }
  throw new Error(`still not done after ${max} turns of the event loop`);
}

const post = (key: string, body = 'pay') =>
  new Request('http://local/pay', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'text/plain' }, body });

describe('sqliteStore: the one writer, busy', () => {
  const open: Array<{ file: SqliteFile; stores: Array<SqliteStore<Database.Database>>; others: Database.Database[] }> = [];
  afterEach(() => {
    for (const { file, stores, others } of open.splice(0)) {
      for (const store of stores) store.close();
      for (const other of others) other.close();
      file.cleanup();
    }
  });

  /** A file with a payments table, and a transactional route whose handler for `long-*` keys waits for `release`. */
  function setup(options: { storeTimeoutMs: number; transactional: boolean; clock?: () => number }) {
    const file = sqliteFile('busy.db');
    file.db.exec('CREATE TABLE payments (key TEXT NOT NULL)');
    const store = sqliteStore({ database: file.db, ...(options.clock ? { clock: options.clock } : {}) });
    const entry = { file, stores: [store], others: [] as Database.Database[] };
    open.push(entry);
    const entered = latch();
    const release = latch();
    const executions = new Map<string, number>();
    const { lines, logger } = recordingLogger();
    const handler = async (request: Request, ctx: { key: string; tx?: Database.Database } | undefined) => {
      const key = ctx!.key;
      executions.set(key, (executions.get(key) ?? 0) + 1);
      (ctx!.tx ?? file.db).prepare('INSERT INTO payments (key) VALUES (?)').run(key);
      if (key.startsWith('long')) {
        entered.open();
        await release.promise;
      }
      return Response.json({ paid: key }, { status: 201 });
    };
    const handle = options.transactional
      ? withIdempotency(handler, { store, transactional: true, storeTimeoutMs: options.storeTimeoutMs, logger })
      : withIdempotency(handler, { store, storeTimeoutMs: options.storeTimeoutMs, logger });
    const rows = (key: string) => (file.db.prepare('SELECT count(*) AS n FROM payments WHERE key = ?').get(key) as { n: number }).n;
    return { file, store, entry, entered, release, executions, lines, handle, rows };
  }

  it('a request with another key, queued behind a long transactional handler, gets 503 store-busy with Retry-After from the holder’s time; the log says the SQLite writer is busy and names storeTimeoutMs', async () => {
    const clock = manualClock();
    const { store, entered, release, executions, lines, handle, rows } = setup({ storeTimeoutMs: 50, transactional: true, clock: clock.now });
    const long = handle(post('long-1'));
    await entered.promise;
    // The holder has held the writer for 4.2 s of the store's clock when the other key gives up.
    await clock.advance(4_200);

    const other = await handle(post('other-1'));
    expect(other.status).toBe(503);
    expect(other.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(other.headers.get('retry-after')).toBe('5');
    const problem = (await other.json()) as { type: string; status: number; detail: string };
    // The hint in ms too, for a client that reads it (idemkit's): the header's 5 s, unrounded.
    expect(problem).toMatchObject({ type: 'urn:idemkit:problem:store-busy', status: 503, retryAfterMs: 4_200 });
    expect(problem.detail).not.toMatch(/SQLite|storeTimeoutMs/);
    expect(executions.get('other-1')).toBeUndefined();

    expect(lines).toHaveLength(1);
    expect(lines[0]!.level).toBe('error');
    expect(lines[0]!.message).toContain('ERR_IDEMKIT_STORE_BUSY');
    expect(lines[0]!.message).toContain('the SQLite writer is busy');
    expect(lines[0]!.message).toContain("claim waited longer than `storeTimeoutMs` (50 ms) behind another request's transaction");
    expect(lines[0]!.message).toContain('one-writer limit');

    release.open();
    expect((await long).status).toBe(201);
    // The refused claim landed once the writer was free, and was given back: the retry runs once.
    await until(async () => (await store.get({ scope: '', key: 'other-1' })) === undefined);
    const retry = await handle(post('other-1'));
    expect(retry.status).toBe(201);
    expect(executions.get('other-1')).toBe(1);
    expect([rows('long-1'), rows('other-1')]).toEqual([1, 1]);
  });

  it('Retry-After is at least 1 s, and the answer is the same through instrumentStore (the explanation is forwarded)', async () => {
    const file = sqliteFile('busy-otel.db');
    const store = sqliteStore({ database: file.db });
    open.push({ file, stores: [store], others: [] });
    const entered = latch();
    const release = latch();
    const { lines, logger } = recordingLogger();
    const handle = withIdempotency(
      async (request, ctx) => {
        if (ctx!.key === 'long') {
          entered.open();
          await release.promise;
        }
        return new Response('ok', { status: 201 });
      },
      { store: instrumentStore(store), transactional: true, storeTimeoutMs: 20, logger },
    );
    const long = handle(post('long'));
    await entered.promise;
    const other = await handle(post('other'));
    expect(other.status).toBe(503);
    expect(other.headers.get('retry-after')).toBe('1');
    expect(((await other.json()) as { type: string }).type).toBe('urn:idemkit:problem:store-busy');
    expect(lines.map((line) => line.message).join('\n')).toContain('the SQLite writer is busy');
    release.open();
    expect((await long).status).toBe(201);
  });

  it('an ORM bridge’s transaction holding the writer: a claim queued behind it is store-busy, and names it', async () => {
    const file = sqliteFile('busy-orm.db');
    const store = sqliteStore({ database: file.db });
    open.push({ file, stores: [store], others: [] });
    const { lines, logger } = recordingLogger();
    const handle = withIdempotency(() => new Response('ok', { status: 201 }), { store, storeTimeoutMs: 20, logger });
    // What idemkit/kysely, idemkit/drizzle, … do before opening the ORM's transaction.
    const leave = await store[TRANSACTION_JOIN].enter();
    const refused = await handle(post('k'));
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { type: string }).type).toBe('urn:idemkit:problem:store-busy');
    expect(lines[0]!.message).toContain("behind another request's transaction (through an ORM bridge)");
    leave();
    await until(async () => (await store.get({ scope: '', key: 'k' })) === undefined);
    expect((await handle(post('k'))).status).toBe(201);
  });

  it('another connection (another process) holding the write lock past busyTimeoutMs: store-busy naming busyTimeoutMs, not a bare store-unavailable', async () => {
    const file = sqliteFile('busy-process.db');
    const store = sqliteStore({ database: file.db, busyTimeoutMs: 10 });
    const other = new Database(file.file);
    open.push({ file, stores: [store], others: [other] });
    const { lines, logger } = recordingLogger();
    const handle = withIdempotency(() => new Response('ok', { status: 201 }), { store, logger });
    other.exec('BEGIN IMMEDIATE');
    const refused = await handle(post('k'));
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(((await refused.json()) as { type: string }).type).toBe('urn:idemkit:problem:store-busy');
    expect(lines).toHaveLength(1);
    expect(lines[0]!.message).toContain('the SQLite writer is busy: claim waited its busy timeout (`busyTimeoutMs`, 10 ms)');
    expect(lines[0]!.message).toContain('held by another connection');
    // The store's own transactions meet the same lock at BEGIN IMMEDIATE.
    await expect(store.beginTransaction()).rejects.toBeInstanceOf(StoreBusyError);
    other.exec('ROLLBACK');
    expect((await handle(post('k'))).status).toBe(201);
  });

  it('a store whose operations are not queued explains nothing: the generic store-unavailable stands', async () => {
    const file = sqliteFile('busy-none.db');
    const store = sqliteStore({ database: file.db });
    open.push({ file, stores: [store], others: [] });
    const { EXPLAIN_LATE } = await import('../../src/core/deadlines.js');
    const explain = (store as unknown as Record<symbol, (operation: string, limitMs: number) => Error | undefined>)[EXPLAIN_LATE]!;
    expect(explain('claim', 3_000)).toBeUndefined();
  });

  it('the docs state the limit next to the default storeTimeoutMs, and which stores queue duplicates', () => {
    const memory = new Database(':memory:');
    expect(resolveOptions({ store: sqliteStore({ database: memory }) }).storeTimeoutMs).toBe(3_000);
    memory.close();
    const sqliteDoc = readFileSync(fileURLToPath(new URL('../../docs/stores/sqlite.md', import.meta.url)), 'utf8');
    expect(sqliteDoc).toContain('### Past `storeTimeoutMs`: 503 `store-busy`');
    expect(sqliteDoc).toContain('(default 3,000 ms;');
    expect(sqliteDoc).toMatch(/\*\*The limit, at the default `storeTimeoutMs`:\*\* a transactional handler on SQLite must hold its\s+transaction \*\*under 3 s\*\*/);
    const semantics = readFileSync(fileURLToPath(new URL('../../docs/semantics.md', import.meta.url)), 'utf8');
    const section = semantics.slice(semantics.indexOf('### Which stores queue duplicates'));
    expect(section).toMatch(/^### Which stores queue duplicates\n/);
    expect(section).toMatch(/SQLite in\s+transactional mode, in the process running the original, queues it instead/);
    expect(section).toMatch(/\*\*replays the answer\*\*/);
  });

  describe('duplicates of a running request (the same key, the same body)', () => {
    const DUPLICATES = 20;

    it('transactional mode: they queue behind the writer and, once it commits, replay its answer (no 409), the handler running once', async () => {
      // A long storeTimeoutMs: this test is about the queue, not the deadline.
      const { entered, release, executions, handle, rows } = setup({ storeTimeoutMs: 60_000, transactional: true });
      const original = handle(post('long-dup'));
      await entered.promise;
      let settled = 0;
      const duplicates = Array.from({ length: DUPLICATES }, () => handle(post('long-dup')).finally(() => settled++));
      // As many turns as the non-transactional test below needs for every 409 to arrive.
      await turns(200);
      expect(settled).toBe(0);
      release.open();
      expect((await original).status).toBe(201);
      const answers = await Promise.all(duplicates);
      expect(answers.map((answer) => answer.status)).toEqual(Array(DUPLICATES).fill(201));
      expect(answers.map((answer) => answer.headers.get('idempotent-replayed'))).toEqual(Array(DUPLICATES).fill('true'));
      expect(executions.get('long-dup')).toBe(1);
      expect(rows('long-dup')).toBe(1);
    });

    it('transactional mode, a duplicate through another Database on the file (as another process): 409 at once, as on PostgreSQL and MySQL', async () => {
      const { file, entry, entered, release, handle } = setup({ storeTimeoutMs: 60_000, transactional: true });
      const elsewhere = new Database(file.file);
      entry.others.push(elsewhere);
      const otherStore = sqliteStore({ database: elsewhere });
      entry.stores.push(otherStore);
      const otherHandle = withIdempotency(() => new Response('never', { status: 500 }), { store: otherStore });
      const original = handle(post('long-elsewhere'));
      await entered.promise;
      const conflict = await otherHandle(post('long-elsewhere'));
      expect(conflict.status).toBe(409);
      expect(((await conflict.json()) as { type: string }).type).toBe('urn:idemkit:problem:request-in-progress');
      release.open();
      expect((await original).status).toBe(201);
    });

    it('without transactional mode nothing holds the writer while the handler runs: 409 request-in-progress at once, as on the other stores', async () => {
      const { entered, release, executions, handle } = setup({ storeTimeoutMs: 60_000, transactional: false });
      const original = handle(post('long-plain'));
      await entered.promise;
      let settled = 0;
      const duplicates = Array.from({ length: DUPLICATES }, () => handle(post('long-plain')).finally(() => settled++));
      await turns(200);
      expect(settled).toBe(DUPLICATES);
      const answers = await Promise.all(duplicates);
      expect(answers.map((answer) => answer.status)).toEqual(Array(DUPLICATES).fill(409));
      release.open();
      expect((await original).status).toBe(201);
      expect(executions.get('long-plain')).toBe(1);
    });
  });
});
