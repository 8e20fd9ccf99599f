/**
 * The completer's own loop, `start()` / `stop()`: rounds counted on fake timers (never a wall
 * clock), the backlog and the interval, jitter, backoff after failed rounds, a graceful stop that
 * finishes the record in hand, a stop past its deadline that gives the lease back, and two loops
 * on one PostgreSQL store completing each abandoned record exactly once (real concurrency).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { redactedKey } from '../../src/core/events.js';
import type { RecordRef } from '../../src/core/store.js';
import type { CompleterOptions } from '../../src/patterns/completer.js';
import { completer } from '../../src/patterns/completer.js';
import { startInstance } from '../../src/core/instance.js';
import type { CompleterRecordEvent, CompleterRoundEvent } from '../../src/patterns/completer-events.js';
import { STARTED, definePhases, foreignKeyFor } from '../../src/patterns/phases.js';
import type { SqliteStore } from '../../src/stores/sqlite/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { manualClock } from '../stores/manual-clock.js';
import { POSTGRES, requireService } from '../support/services.js';
import { until } from '../support/until.js';
import { startForeignService } from './foreign-service.js';
import { SCOPE, checkoutPhases, openCheckoutBackend } from './phases-app.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-completer-runner-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Real macrotask turns (setImmediate is not faked): a round's promise chain runs to its end. */
async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** Moves the fake timers, then lets what they started finish. */
async function advance(ms: number): Promise<void> {
  await vi.advanceTimersByTimeAsync(ms);
  await flush();
}

/** A promise the test resolves by hand. */
function gate(): { readonly wait: Promise<void>; open(): void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => (open = resolve));
  return { wait, open };
}

describe('completer.start() / stop() (SQLite, fake timers)', () => {
  let db: Database.Database;
  let store: SqliteStore<Database.Database>;
  // The store's clock, moved by hand: leases run out when a test says so, and "the lease was given
  // back" is an exact comparison with it.
  let clock: ReturnType<typeof manualClock>;
  let foreignCalls: string[];
  /** When set, the foreign phase waits for it (once): the record is "in hand". */
  let hold: Promise<void> | undefined;

  beforeEach(() => {
    // Only the timers: the store reads its own clock, and setImmediate stays real for flush().
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'] });
    db = new Database(join(dir, `runner-${randomUUID()}.db`));
    clock = manualClock();
    store = sqliteStore({ database: db, clock: clock.now });
    db.exec('CREATE TABLE orders (key TEXT NOT NULL, charge TEXT)');
    foreignCalls = [];
    hold = undefined;
  });
  afterEach(() => {
    // In this order: a spy on the fake setTimeout, restored after, would put the fake one back.
    vi.restoreAllMocks();
    vi.useRealTimers();
    db.close();
  });

  const checkout = () =>
    definePhases<{ amount: number }, Database.Database>('checkout')
      .phase('order_created', ({ tx, key }) => {
        tx.prepare('INSERT INTO orders (key) VALUES (?)').run(key);
        return { order: key };
      })
      .foreign('charged', async ({ foreignKey, input }) => {
        foreignCalls.push(foreignKey);
        const waiting = hold;
        hold = undefined;
        if (waiting) await waiting;
        return { charge: `ch_${input.amount}` };
      })
      .phase('finished', ({ tx, key, data }) => {
        tx.prepare('UPDATE orders SET charge = ? WHERE key = ?').run(data.charged.charge, key);
        return { order: data.order_created.order, charge: data.charged.charge };
      });

  /** Records whose owner died: claimed, the `started` point written (or not, `bare`), then their leases run out. */
  async function abandoned(count: number, options: { bare?: boolean } = {}): Promise<RecordRef[]> {
    const refs: RecordRef[] = [];
    for (let i = 0; i < count; i++) {
      const ref = { scope: 't', key: `k-${randomUUID()}` };
      const claim = await store.claim(ref, `fp-${ref.key}`, { leaseMs: 20, windowMs: 3_600_000 });
      if (claim.kind !== 'acquired') throw new Error(claim.kind);
      if (!options.bare) await store.checkpoint(ref, claim.token, STARTED, { phases: 'checkout', input: { amount: 5 }, data: {} });
      refs.push(ref);
    }
    await clock.advance(20);
    return refs;
  }

  /** A completer whose events and errors are recorded. */
  function recorded(options: Partial<CompleterOptions> = {}) {
    const told: Array<[name: string, event: CompleterRecordEvent]> = [];
    const rounds: CompleterRoundEvent[] = [];
    const failedRounds: CompleterRoundEvent[] = [];
    const errors: Array<[error: unknown, record: RecordRef | undefined]> = [];
    const record = (name: string) => (event: CompleterRecordEvent) => void told.push([name, event]);
    const c = completer({
      store,
      phases: checkout(),
      response: (result) => ({ status: 201, body: result }),
      onError: (error, ref) => void errors.push([error, ref]),
      events: {
        resumed: record('resumed'),
        completed: record('completed'),
        failed: record('failed'),
        yielded: record('yielded'),
        round: (event) => void rounds.push(event),
        roundFailed: (event) => void failedRounds.push(event),
      },
      ...options,
    });
    const keys = (name: string) => told.filter(([n]) => n === name).map(([, event]) => event.key);
    return { c, told, rounds, failedRounds, errors, keys };
  }

  const orders = (key: string) => db.prepare('SELECT key, charge FROM orders WHERE key = ?').all(key);

  it('runs the first round at once (no jitter), then one per interval, until stop()', async () => {
    const { c, rounds } = recorded();
    c.start({ intervalMs: 1_000, jitter: 0 });
    await advance(0);
    expect(rounds).toHaveLength(1);
    await advance(999);
    expect(rounds).toHaveLength(1);
    await advance(1);
    expect(rounds).toHaveLength(2);
    await advance(3_000);
    expect(rounds).toHaveLength(5);
    expect(rounds.map((r) => [r.examined, r.nextInMs, r.failures])).toEqual(Array.from({ length: 5 }, () => [0, 1_000, 0]));
    await c.stop();
    await advance(10_000);
    expect(rounds).toHaveLength(5);
  });

  it("unrefs its timer unless keepAlive, so it never keeps a process alive by itself", async () => {
    const timeouts = vi.spyOn(globalThis, 'setTimeout');
    const { c } = recorded();
    c.start({ jitter: 0 });
    expect((timeouts.mock.results.at(-1)!.value as NodeJS.Timeout).hasRef()).toBe(false);
    await c.stop();
    c.start({ jitter: 0, keepAlive: true });
    expect((timeouts.mock.results.at(-1)!.value as NodeJS.Timeout).hasRef()).toBe(true);
    await c.stop();
  });

  it('runs the next round at once after a full batch with progress (a backlog), and waits the interval after a short one', async () => {
    const refs = await abandoned(5);
    const { c, rounds, keys } = recorded();
    c.start({ intervalMs: 10_000, jitter: 0, batchSize: 2 });
    await advance(0);
    await advance(10);
    expect(rounds.map((r) => [r.examined, r.completed, r.nextInMs])).toEqual([
      [2, 2, 0],
      [2, 2, 0],
      [1, 1, 10_000],
    ]);
    expect(keys('completed').sort()).toEqual(refs.map((r) => r.key).sort());
    for (const ref of refs) expect((await store.get(ref))?.state).toBe('completed');
    await advance(9_980);
    expect(rounds).toHaveLength(3);
    await advance(20);
    expect(rounds).toHaveLength(4);
    await c.stop();
  });

  it('waits the interval after a full batch it could only skip: it does not list the same records in a loop', async () => {
    await abandoned(2, { bare: true });
    const { c, rounds } = recorded();
    c.start({ intervalMs: 10_000, jitter: 0, batchSize: 2 });
    await advance(0);
    await advance(9_999);
    expect(rounds.map((r) => [r.examined, r.skipped, r.nextInMs])).toEqual([[2, 2, 10_000]]);
    await c.stop();
  });

  it('spreads its pauses by ±jitter, and the first round by up to intervalMs × jitter', async () => {
    // 0.5 → the first round after 1_000 × 0.2 × 0.5; then 1 → 1_200 (the top), 0 → 800 (the bottom).
    vi.spyOn(Math, 'random').mockReturnValueOnce(0.5).mockReturnValueOnce(1).mockReturnValueOnce(0).mockReturnValue(0.5);
    const { c, rounds } = recorded();
    c.start({ intervalMs: 1_000 });
    await advance(99);
    expect(rounds).toHaveLength(0);
    await advance(1);
    expect(rounds).toHaveLength(1);
    await advance(1_199);
    expect(rounds).toHaveLength(1);
    await advance(1);
    expect(rounds).toHaveLength(2);
    await advance(800);
    expect(rounds).toHaveLength(3);
    expect(rounds.map((r) => r.nextInMs)).toEqual([1_200, 800, 1_000]);
    await c.stop();
  });

  it('stop() lets the round finish the record in hand, takes no further record and starts no new round', async () => {
    const [a, b] = await abandoned(2);
    const inHand = gate();
    hold = inHand.wait;
    const { c, rounds, keys, errors } = recorded();
    c.start({ jitter: 0 });
    await advance(0);
    expect(keys('resumed')).toHaveLength(1);
    const [first] = keys('resumed');
    const other = first === a!.key ? b! : a!;
    let stopped = false;
    const stopping = c.stop().then(() => void (stopped = true));
    // No deadline: it waits as long as the record takes (the lease is renewed meanwhile).
    await advance(120_000);
    expect(stopped).toBe(false);
    inHand.open();
    await stopping;
    expect(keys('completed')).toEqual([first]);
    expect(await store.get({ scope: 't', key: first! })).toMatchObject({ state: 'completed' });
    expect(orders(first!)).toEqual([{ key: first, charge: 'ch_5' }]);
    // The other record was listed but not taken: as the crash left it.
    expect(await store.get(other)).toMatchObject({ state: 'in_flight', recoveryPoint: STARTED });
    expect(orders(other.key)).toEqual([]);
    expect(rounds.map((r) => [r.examined, r.completed, r.nextInMs])).toEqual([[2, 1, undefined]]);
    await advance(60_000);
    expect(rounds).toHaveLength(1);
    expect(keys('resumed')).toHaveLength(1);
    expect(errors).toEqual([]);
  });

  it("stop({ timeoutMs }) past its deadline gives the record's lease back: another completer resumes it at once, and the first writes nothing more", async () => {
    const [ref] = await abandoned(1);
    const inHand = gate();
    hold = inHand.wait;
    const { c, keys, told, errors } = recorded({ leaseMs: 30_000 });
    c.start({ jitter: 0 });
    await advance(0);
    expect(keys('resumed')).toEqual([ref!.key]);
    // Held: its lease ends 30 s from now on the store's clock.
    expect((await store.get(ref!))!.leaseUntil).toBeGreaterThan(clock.now());
    let stopped = false;
    const stopping = c.stop({ timeoutMs: 1_000 }).then(() => void (stopped = true));
    await advance(999);
    expect(stopped).toBe(false);
    await advance(1);
    await stopping;
    const record = await store.get(ref!);
    expect(record).toMatchObject({ state: 'in_flight', recoveryPoint: 'order_created' });
    expect(record!.leaseUntil).toBeLessThanOrEqual(clock.now());
    expect(keys('yielded')).toEqual([ref!.key]);

    // Without the store's clock moving, a second completer takes it over and finishes it.
    const second = completer({ store, phases: checkout(), response: (result) => ({ status: 201, body: result }) });
    const report = await second.runOnce();
    expect(report.completed).toEqual([ref]);
    expect(orders(ref!.key)).toEqual([{ key: ref!.key, charge: 'ch_5' }]);

    // The first one's foreign call returns late: its checkpoint is refused, nothing is written or told.
    const toldBefore = told.length;
    inHand.open();
    await advance(0);
    expect(told).toHaveLength(toldBefore);
    expect(errors).toEqual([]);
    expect((await store.get(ref!))?.state).toBe('completed');
    expect(orders(ref!.key)).toHaveLength(1);
    // Both called the foreign service with the record's one key: it deduplicates the second call.
    expect(foreignCalls).toEqual([foreignKeyFor('t', ref!.key, 'charged'), foreignKeyFor('t', ref!.key, 'charged')]);
  });

  it('a later stop() may bring a deadline: the earliest one applies', async () => {
    const [ref] = await abandoned(1);
    hold = new Promise(() => {}); // never returns
    const { c, keys } = recorded();
    c.start({ jitter: 0 });
    await advance(0);
    let done = 0;
    const graceful = c.stop().then(() => void done++);
    const bounded = c.stop({ timeoutMs: 500 }).then(() => void done++);
    await advance(499);
    expect(done).toBe(0);
    await advance(1);
    await Promise.all([graceful, bounded]);
    expect(done).toBe(2);
    expect(keys('yielded')).toEqual([ref!.key]);
    expect((await store.get(ref!))!.leaseUntil).toBeLessThanOrEqual(clock.now());
  });

  it('reports a round that cannot list (the store is down), backs off while it keeps failing, and goes on', async () => {
    const [ref] = await abandoned(1);
    let down = 4;
    const flaky = { ...store, listAbandoned: (limit?: number) => (down-- > 0 ? Promise.reject(new Error('store down')) : store.listAbandoned(limit)) };
    const { c, rounds, failedRounds, errors, keys } = recorded({ store: flaky });
    c.start({ intervalMs: 1_000, jitter: 0, maxBackoffMs: 4_000 });
    await advance(0);
    expect(failedRounds).toHaveLength(1);
    await advance(999);
    expect(failedRounds).toHaveLength(1);
    await advance(1); // t = 1_000
    expect(failedRounds).toHaveLength(2);
    await advance(1_999);
    expect(failedRounds).toHaveLength(2);
    await advance(1); // t = 3_000
    await advance(4_000); // t = 7_000
    await advance(3_999);
    expect(rounds).toHaveLength(0);
    await advance(1); // t = 11_000: the store is back
    expect(failedRounds.map((r) => [r.failures, r.nextInMs, (r.error as Error).message])).toEqual([
      [1, 1_000, 'store down'],
      [2, 2_000, 'store down'],
      [3, 4_000, 'store down'],
      [4, 4_000, 'store down'],
    ]);
    expect(errors.map(([error, record]) => [(error as Error).message, record])).toEqual(Array.from({ length: 4 }, () => ['store down', undefined]));
    expect(rounds.map((r) => [r.failures, r.completed, r.nextInMs])).toEqual([[0, 1, 1_000]]);
    expect(keys('completed')).toEqual([ref!.key]);
    await c.stop();
  });

  it('tells a listener that throws to onError and goes on', async () => {
    const errors: unknown[] = [];
    let rounds = 0;
    const c = completer({
      store,
      phases: checkout(),
      onError: (error) => void errors.push(error),
      events: {
        round: () => {
          rounds++;
          throw new Error('listener broke');
        },
      },
    });
    c.start({ intervalMs: 1_000, jitter: 0 });
    await advance(2_000);
    expect(rounds).toBe(3);
    expect(errors.map((e) => (e as Error).message)).toEqual(['listener broke', 'listener broke', 'listener broke']);
    await c.stop();
  });

  it('tells what it resumed and completed, in runOnce() too, with the key hashed under redactKeys', async () => {
    const [ref] = await abandoned(1);
    const { c, told, rounds } = recorded({ redactKeys: true });
    const report = await c.runOnce();
    expect(report.completed).toEqual([ref]);
    expect(report.yielded).toEqual([]);
    const hashed = redactedKey('t', ref!.key);
    expect(hashed).toMatch(/^sha256:[0-9a-f]{32}$/);
    expect(told.map(([name, event]) => [name, event.scope, event.key, event.phases, event.resumeFrom, event.status])).toEqual([
      ['resumed', 't', hashed, 'checkout', STARTED, undefined],
      ['completed', 't', hashed, 'checkout', STARTED, 201],
    ]);
    // Round events belong to start()'s loop: runOnce's caller has the report.
    expect(rounds).toEqual([]);
  });

  it('tells a record whose phases failed (given up for this round, its lease given back)', async () => {
    const [ref] = await abandoned(1);
    const failing = definePhases<{ amount: number }, Database.Database>('checkout').foreign('charged', () => {
      throw new Error('the channel is down');
    });
    const { c, told, errors } = recorded({ phases: failing });
    const report = await c.runOnce();
    expect(report.failed.map((f) => f.record)).toEqual([ref]);
    expect(told.map(([name, event]) => [name, event.key, (event.error as Error | undefined)?.message])).toEqual([
      ['resumed', ref!.key, undefined],
      ['failed', ref!.key, 'the channel is down'],
    ]);
    expect(errors.map(([error, record]) => [(error as Error).message, record])).toEqual([['the channel is down', ref]]);
    expect((await store.get(ref!))!.leaseUntil).toBeLessThanOrEqual(clock.now());
  });

  it('refuses a second start() while running or stopping, resolves stop() when not started, and starts again after stop()', async () => {
    const { c, rounds } = recorded();
    await expect(c.stop()).resolves.toBeUndefined();
    c.start({ jitter: 0 });
    expect(() => c.start()).toThrow(/already running; call stop\(\) first/);
    const [ref] = await abandoned(1);
    hold = new Promise(() => {});
    await advance(0);
    const stopping = c.stop({ timeoutMs: 100 });
    expect(() => c.start()).toThrow(/stopping; await stop\(\) before starting it again/);
    await advance(100);
    await stopping;
    expect((await store.get(ref!))?.state).toBe('in_flight');
    c.start({ jitter: 0, intervalMs: 1_000 });
    await advance(0);
    // The second loop resumes the record the first gave back.
    expect((await store.get(ref!))?.state).toBe('completed');
    expect(rounds.at(-1)).toMatchObject({ completed: 1 });
    await c.stop();
  });

  it('validates its options eagerly, naming the option', async () => {
    const c = completer({ store, phases: checkout() });
    expect(() => c.start({ intervalMs: 0 })).toThrow(/`intervalMs`/);
    expect(() => c.start({ batchSize: 1.5 })).toThrow(/`batchSize`/);
    expect(() => c.start({ jitter: 1.5 })).toThrow(/`jitter`.*between 0 and 1/);
    expect(() => c.start({ intervalMs: 10_000, maxBackoffMs: 5_000 })).toThrow(/`maxBackoffMs`.*>= 10000/);
    expect(() => c.start({ keepAlive: 'yes' } as never)).toThrow(/`keepAlive`/);
    expect(() => c.start({ interval: 5 } as never)).toThrow(/`interval`.*did you mean `intervalMs`/);
    await expect(c.stop({ timeoutMs: -1 })).rejects.toThrow(/`timeoutMs`/);
    // Refused options started nothing.
    expect(() => c.start({ jitter: 0 })).not.toThrow();
    await c.stop();
    expect(() => completer({ store, phases: checkout(), events: { complete: () => {} } as never })).toThrow(/`events.complete`.*did you mean `completed`/);
    expect(() => completer({ store, phases: checkout(), events: { resumed: 1 } as never })).toThrow(/`events.resumed`/);
    expect(() => completer({ store, phases: checkout(), redactKeys: 'yes' } as never)).toThrow(/`redactKeys`/);
  });

  it('with an instance, its claims carry the incarnation: a restart under the name frees the record it held at once', async () => {
    const quiet = { warn: () => {}, error: () => {} };
    const [ref] = await abandoned(1);
    const instance = await startInstance({ store, name: `worker-${randomUUID()}`, logger: quiet });
    const inHand = gate();
    hold = inHand.wait;
    const { c } = recorded({ instance });
    const running = c.runOnce();
    for (let i = 0; i < 50 && foreignCalls.length === 0; i++) await flush();
    expect(foreignCalls).toHaveLength(1);
    // The completer holds the record under its own lease (30 s); its successor ends it by the incarnation.
    expect(await store.endLeasesOf(instance.incarnation)).toBe(1);
    expect(await store.claim(ref!, `fp-${ref!.key}`, { leaseMs: 30_000, windowMs: 3_600_000 })).toMatchObject({ kind: 'acquired', takeover: true });
    inHand.open();
    await running;
    await instance.stop();
    // An instance registered on another store is refused, naming the option.
    const other = sqliteStore({ database: new Database(':memory:'), clock: clock.now });
    await other.migrate();
    const elsewhere = await startInstance({ store: other, name: 'w', logger: quiet });
    expect(() => completer({ store, phases: checkout(), instance: elsewhere })).toThrow(/`instance`.*another store/);
    await elsewhere.stop();
  });
});

const postgres = await requireService(POSTGRES);

describe.skipIf(!postgres)('two completer loops on one PostgreSQL store (real concurrency)', () => {
  it('complete each abandoned record exactly once between them', async () => {
    const name = `runner_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
    const url = 'postgres://postgres@127.0.0.1:5432/test';
    const foreign = await startForeignService();
    const one = await openCheckoutBackend(url, name);
    const two = await openCheckoutBackend(url, name);
    try {
      await one.migrate();
      const keys = Array.from({ length: 24 }, () => randomUUID());
      for (const [i, key] of keys.entries()) {
        const ref = { scope: SCOPE, key };
        const claim = await one.store.claim(ref, `fp-${key}`, { leaseMs: 1, windowMs: 3_600_000 });
        if (claim.kind !== 'acquired') throw new Error(claim.kind);
        await one.store.checkpoint(ref, claim.token, STARTED, { phases: 'checkout', input: { amount: 100 + i }, data: {} });
      }
      // The owners "died": their 1 ms leases run out on the database's clock.
      await until(async () => (await one.store.listAbandoned(100)).length === keys.length, 'the leases to run out');

      const loop = (backend: typeof one) => {
        const completed: string[] = [];
        const failed: unknown[] = [];
        const c = completer({
          store: backend.store,
          phases: checkoutPhases({ name, foreignUrl: foreign.url, dialect: backend.db.dialect }),
          response: (result) => ({ status: 201, body: result }),
          onError: (error) => void failed.push(error),
          events: { completed: (event) => void completed.push(event.key) },
        });
        return { c, completed, failed };
      };
      const a = loop(one);
      const b = loop(two);
      // Small batches and a short interval: the two list the same records and race for their claims.
      a.c.start({ intervalMs: 5, batchSize: 3 });
      b.c.start({ intervalMs: 5, batchSize: 3 });
      try {
        await until(async () => a.completed.length + b.completed.length >= keys.length, 'every record to be completed', 30_000);
      } finally {
        // Stopped either way: a loop left running would hold the tables the cleanup drops.
        await Promise.all([a.c.stop({ timeoutMs: 5_000 }), b.c.stop({ timeoutMs: 5_000 })]);
      }

      expect([...a.failed, ...b.failed]).toEqual([]);
      expect(a.completed.filter((key) => b.completed.includes(key))).toEqual([]);
      expect([...a.completed, ...b.completed].sort()).toEqual([...keys].sort());
      for (const key of keys) {
        const orders = await one.db.query<{ charged: number }>(`SELECT charged FROM orders_${name} WHERE "key" = ?`, [key]);
        expect(orders.rows.map((r) => Number(r.charged)), `order rows of ${key}`).toEqual([1]);
        const jobs = await one.db.query(`SELECT charge_id FROM jobs_${name} WHERE "key" = ?`, [key]);
        expect(jobs.rows, `jobs of ${key}`).toHaveLength(1);
        expect(foreign.effects.get(foreignKeyFor(SCOPE, key, 'charged')), `foreign charges of ${key}`).toBe(1);
        expect((await one.store.get({ scope: SCOPE, key }))?.state).toBe('completed');
      }
    } finally {
      await one.drop();
      await one.close();
      await two.close();
      await foreign.close();
    }
  }, 60_000);
});
