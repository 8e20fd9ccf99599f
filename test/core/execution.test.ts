import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Execution } from '../../src/core/engine.js';
import { IdempotencyEngine } from '../../src/core/engine.js';
import { InvalidRecordRefError, TransactionEndedError } from '../../src/core/errors.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { sqliteFile } from '../support/sqlite-file.js';
import { testSqliteDriver } from '../support/sqlite-driver.js';

const facts = { method: 'POST', path: '/charges', contentType: 'application/json', body: Buffer.from('{}') };
const answer = { status: 201, headers: [], body: Buffer.from('{}'), bodyOmitted: false };

/** The engine's decision for a request with these facts under `key`. */
function decideFacts(engine: IdempotencyEngine, key: string) {
  return engine.decide({}, { method: () => facts.method, header: () => key, path: () => facts.path, contentType: () => facts.contentType, readBody: () => facts });
}

async function watchedExecution(key: string): Promise<{ execution: Execution; engine: IdempotencyEngine }> {
  const engine = new IdempotencyEngine({ store: memoryStore({ sweepIntervalMs: 0 }) });
  const admission = await decideFacts(engine, key);
  if (admission.kind !== 'execute') throw new Error(`expected execute, got ${admission.kind}`);
  const response = { writableFinished: false };
  admission.execution.watch(response, (r) => r.writableFinished);
  return { execution: admission.execution, engine };
}

/**
 * The Express adapter keeps its per-request state in a WeakMap keyed by the response, and the
 * state holds the execution: an execution that still pointed at its response after the request
 * would make that a cycle through an ephemeron, which V8's young-generation collector keeps alive
 * (every finished request then survives, and is copied by, each scavenge). Private state is read
 * here on purpose: the cycle has no behaviour a test could see, only a cost.
 */
const watched = (execution: Execution) => (execution as unknown as { watched: object | undefined }).watched;

describe('Execution lets go of its response when it ends', () => {
  it('on finish', async () => {
    const { execution } = await watchedExecution('finish');
    expect(watched(execution)).toBeDefined();
    await execution.finish(answer);
    expect(watched(execution)).toBeUndefined();
  });

  it('on abort', async () => {
    const { execution } = await watchedExecution('abort');
    await execution.abort();
    expect(watched(execution)).toBeUndefined();
  });
});

describe('the lease belongs to the handler, not to the connection', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const admitted = async (engine: IdempotencyEngine, key: string) => {
    const admission = await decideFacts(engine, key);
    if (admission.kind !== 'execute') throw new Error(`expected execute, got ${admission.kind}`);
    return admission.execution;
  };

  it('keeps renewing while the handler runs after its client left, then stores and replays its answer', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine({ store, leaseMs: 300 });
    const execution = await admitted(engine, 'gone');
    // A Node response whose client hung up: destroyed, never finished.
    const response = { writableFinished: false, destroyed: true };
    execution.watch(response, (r) => r.writableFinished);
    await vi.advanceTimersByTimeAsync(3_000); // ten leases
    const during = await decideFacts(engine, 'gone');
    expect(during.kind === 'reject' && during.error.code).toBe('ERR_IDEMKIT_KEY_IN_FLIGHT');
    expect(await execution.finish(answer)).toBeUndefined();
    const after = await decideFacts(engine, 'gone');
    expect(after.kind).toBe('replay');
    store.close();
  });

  it('past maxExecutionMs stops renewing and says so; a retry takes over and the late completion is refused by the token', async () => {
    const reported: unknown[] = [];
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine({ store, leaseMs: 300, maxExecutionMs: 1_000, onError: (e) => reported.push(e) });
    const first = await admitted(engine, 'slow');
    await vi.advanceTimersByTimeAsync(900);
    expect((await decideFacts(engine, 'slow')).kind).toBe('reject'); // still renewed
    await vi.advanceTimersByTimeAsync(600); // the ceiling, then a whole lease without renewal
    expect(reported).toContainEqual(expect.objectContaining({ code: 'ERR_IDEMKIT_EXECUTION_TIMEOUT' }));
    const second = await admitted(engine, 'slow');
    expect(second.context.takeover).toBe(true);
    expect(await first.finish({ ...answer, body: Buffer.from('"first"') })).toBeUndefined();
    expect(reported).toContainEqual(expect.objectContaining({ code: 'ERR_IDEMKIT_LEASE_LOST' }));
    await second.finish({ ...answer, body: Buffer.from('"second"') });
    const replay = await decideFacts(engine, 'slow');
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body!).toString()).toBe('"second"');
    store.close();
  });
});

// better-sqlite3's own API (transaction(), inTransaction): on the runtimes where it does not load
// (Node 22/24, Bun, Deno: test/support/sqlite-driver.ts) the suite is skipped.
describe.skipIf(testSqliteDriver !== 'better-sqlite3')('ctx.tx refuses use once its execution is over (SQLite)', () => {
  const setup = (options: { maxExecutionMs?: number; onError?: (e: unknown) => void } = {}) => {
    const { db, cleanup } = sqliteFile();
    db.exec('CREATE TABLE effects (key TEXT NOT NULL)');
    const store = sqliteStore({ database: db });
    const engine = new IdempotencyEngine({ store, transactional: true, leaseMs: 300, ...options });
    const effects = () => (db.prepare('SELECT count(*) AS n FROM effects').get() as { n: number }).n;
    const close = () => {
      store.close();
      cleanup();
    };
    return { db, store, engine, effects, close };
  };
  const admitted = async (engine: IdempotencyEngine, key: string) => {
    const admission = await decideFacts(engine, key);
    if (admission.kind !== 'execute') throw new Error(`expected execute, got ${admission.kind}`);
    return admission.execution;
  };

  it('is the driver object while the request runs, and refuses every call after it answered', async () => {
    const { engine, effects, close } = setup();
    const execution = await admitted(engine, 'k');
    const tx = execution.context.tx as Database.Database;
    expect(tx).toBeInstanceOf(Database);
    expect(tx.inTransaction).toBe(true);
    const insert = tx.prepare('INSERT INTO effects (key) VALUES (?)');
    insert.run('during');
    const many = tx.transaction((n: number) => {
      for (let i = 0; i < n; i++) insert.run(`nested-${i}`);
    });
    await execution.finish(answer);
    expect(effects()).toBe(1);
    expect(() => tx.prepare('INSERT INTO effects (key) VALUES (?)')).toThrow(TransactionEndedError);
    expect(() => insert.run('after')).toThrow(TransactionEndedError);
    expect(() => many(2)).toThrow(TransactionEndedError);
    expect(() => tx.exec("INSERT INTO effects (key) VALUES ('after')")).toThrow(/ctx\.tx was used after its request ended/);
    expect(effects()).toBe(1);
    close();
  });

  it('a phase transaction (ctx.beginTransaction) refuses use once it committed', async () => {
    const { db, cleanup } = sqliteFile();
    db.exec('CREATE TABLE effects (key TEXT NOT NULL)');
    const store = sqliteStore({ database: db });
    const engine = new IdempotencyEngine({ store });
    const execution = await admitted(engine, 'phase');
    const phase = await execution.context.beginTransaction();
    const tx = phase.tx as Database.Database;
    tx.prepare('INSERT INTO effects (key) VALUES (?)').run('in the phase');
    await phase.checkpoint('charged');
    await phase.commit();
    expect(() => tx.prepare('INSERT INTO effects (key) VALUES (?)').run('after')).toThrow(/the phase transaction was used after it committed/);
    expect((db.prepare('SELECT count(*) AS n FROM effects').get() as { n: number }).n).toBe(1);
    await execution.finish(answer);
    store.close();
    cleanup();
  });

  it('past maxExecutionMs rolls back at once, refuses the late write, and answers execution-timeout', async () => {
    vi.useFakeTimers();
    try {
      const reported: unknown[] = [];
      const { db, store, engine, effects, close } = setup({ maxExecutionMs: 500, onError: (e) => reported.push(e) });
      const execution = await admitted(engine, 'late');
      const tx = execution.context.tx as Database.Database;
      tx.prepare('INSERT INTO effects (key) VALUES (?)').run('before the ceiling');
      await vi.advanceTimersByTimeAsync(700);
      expect(reported).toContainEqual(expect.objectContaining({ code: 'ERR_IDEMKIT_EXECUTION_TIMEOUT' }));
      // Rolled back while the handler still runs: the file's write lock is free again.
      expect(() => db.exec('BEGIN IMMEDIATE; ROLLBACK')).not.toThrow();
      expect(() => tx.prepare('INSERT INTO effects (key) VALUES (?)').run('after')).toThrow(/maxExecutionMs/);
      await expect(execution.context.checkpoint('late')).rejects.toThrow(TransactionEndedError);
      const answered = await execution.finish(answer);
      expect(answered?.code).toBe('ERR_IDEMKIT_EXECUTION_TIMEOUT');
      expect(answered?.status).toBe(503);
      expect(effects()).toBe(0);
      expect(await store.get({ scope: '', key: 'late' })).toBeUndefined(); // released: nothing committed
      close();
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('a scope that cannot be stored as text, or that is reserved for idemkit\'s own records', () => {
  it.each([['\uD800'], ['tenant-\uDC00'], ['\uDC00\uD800'], ['\u001fidemkit:message:stripe']])('answers 400 invalid-scope for %j and claims nothing', async (scope) => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine({ store, scope: () => scope });
    const admission = await decideFacts(engine, 'k');
    expect(admission.kind === 'reject' && admission.error.status).toBe(400);
    expect(admission.kind === 'reject' && admission.error.problem().type).toBe('urn:idemkit:problem:invalid-scope');
    expect(store.stats().records).toBe(0);
    // A well-formed astral character is an ordinary scope.
    const emoji = new IdempotencyEngine({ store, scope: () => 'tenant-\u{1F600}' });
    expect((await decideFacts(emoji, 'k')).kind).toBe('execute');
    store.close();
  });
});

describe('a scope the store refuses', () => {
  it('answers 400 invalid-scope, not 503, and failOpen does not run the handler unprotected', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    // As the MySQL store refuses a scope over its column's 1,024 bytes.
    const refusing = { ...store, name: 'refusing', claim: () => Promise.reject(new InvalidRecordRefError('scope', 'longer than 1024 bytes')) };
    const engine = new IdempotencyEngine({ store: refusing, failOpen: true });
    const admission = await decideFacts(engine, 'k');
    expect(admission.kind === 'reject' && admission.error.code).toBe('ERR_IDEMKIT_SCOPE_INVALID');
    expect(admission.kind === 'reject' && admission.error.message).toContain('longer than 1024 bytes');
    store.close();
  });
});

/**
 * A request that ends without a result (discard, a hijacked reply) releases its claim so a retry
 * runs at once, unless the record holds committed progress: releasing would delete the recovery
 * point and the retry would run committed phases again (the model's finding, docs/model.md).
 */
describe('a claim that ends without a result keeps committed progress', () => {
  const admitted = async (engine: IdempotencyEngine, key: string) => {
    const admission = await decideFacts(engine, key);
    if (admission.kind !== 'execute') throw new Error(`expected execute, got ${admission.kind}`);
    return admission.execution;
  };

  it('nothing committed: discard releases the record, and the retry runs as a new request', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine({ store });
    const first = await admitted(engine, 'fresh');
    first.context.discard();
    await first.finish({ ...answer, status: 400 });
    expect(await store.get({ scope: '', key: 'fresh' })).toBeUndefined();
    const retry = await admitted(engine, 'fresh');
    expect(retry.context.takeover).toBe(false);
    store.close();
  });

  it('a checkpoint committed, then discard: the record stays in flight with its lease given back, and the retry resumes there', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine({ store });
    const first = await admitted(engine, 'phased');
    await first.context.checkpoint('phase-1', { charged: true });
    first.context.discard();
    await first.finish({ ...answer, status: 400 });
    expect(await store.get({ scope: '', key: 'phased' })).toMatchObject({ state: 'in_flight', recoveryPoint: 'phase-1' });
    const retry = await admitted(engine, 'phased');
    expect(retry.context).toMatchObject({ takeover: true, resumeFrom: 'phase-1', recoveryData: { charged: true } });
    store.close();
  });

  it('a take-over that discards without a checkpoint of its own still keeps the earlier owner\'s recovery point', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine({ store });
    const first = await admitted(engine, 'inherited');
    await first.context.checkpoint('phase-1');
    first.context.suspend();
    await first.finish(answer);
    const second = await admitted(engine, 'inherited');
    expect(second.context.resumeFrom).toBe('phase-1');
    second.context.discard();
    await second.finish({ ...answer, status: 400 });
    const third = await admitted(engine, 'inherited');
    expect(third.context.resumeFrom).toBe('phase-1');
    store.close();
  });

  it('a hijacked reply (abort) after a checkpoint keeps the record, and says `suspended` to the complete event', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const outcomes: string[] = [];
    const engine = new IdempotencyEngine({ store, events: { complete: (event) => outcomes.push(event.outcome) } });
    const kept = await admitted(engine, 'hijacked');
    await kept.context.checkpoint('phase-1');
    await kept.abort();
    const dropped = await admitted(engine, 'hijacked-early');
    await dropped.abort();
    expect(outcomes).toEqual(['suspended', 'released']);
    expect((await admitted(engine, 'hijacked')).context.resumeFrom).toBe('phase-1');
    expect(await store.get({ scope: '', key: 'hijacked-early' })).toBeUndefined();
    store.close();
  });

  it('a phase transaction that committed its checkpoint counts as progress; one rolled back does not (SQLite)', async () => {
    const { db, cleanup } = sqliteFile('progress.db');
    const store = sqliteStore({ database: db });
    const engine = new IdempotencyEngine({ store });
    const committed = await admitted(engine, 'phase-committed');
    const phase = await committed.context.beginTransaction();
    await phase.checkpoint('phase-1');
    await phase.commit();
    committed.context.discard();
    await committed.finish({ ...answer, status: 400 });
    expect((await admitted(engine, 'phase-committed')).context.resumeFrom).toBe('phase-1');

    const rolledBack = await admitted(engine, 'phase-rolled-back');
    const undone = await rolledBack.context.beginTransaction();
    await undone.checkpoint('phase-1');
    await undone.rollback();
    rolledBack.context.discard();
    await rolledBack.finish({ ...answer, status: 400 });
    expect(await store.get({ scope: '', key: 'phase-rolled-back' })).toBeUndefined();
    store.close();
    cleanup();
  });
});
