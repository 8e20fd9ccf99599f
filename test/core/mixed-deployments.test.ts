/**
 * Two engines with different options on one store: a rolling deploy, or two services sharing
 * records (issue 26, items 8–10). Real stores; the race runs real concurrent requests.
 */
import { readFileSync } from 'node:fs';
import { createPool } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Decision, RequestBody, RequestReader } from '../../src/core/engine.js';
import { IdempotencyEngine } from '../../src/core/engine.js';
import type { EngineOptions } from '../../src/core/options.js';
import { BodyTooLargeError, InvalidOptionError, InvalidScopeError, KeyMismatchError } from '../../src/core/errors.js';
import { fingerprint } from '../../src/core/fingerprint.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { openSqlite } from '../support/sqlite-driver.js';
import { manualClock } from '../stores/manual-clock.js';
import { dropTable, newPool, uniqueTable } from '../stores/postgres-support.js';

interface Req {
  readonly tenant: string;
  readonly key: string;
  readonly body: string;
}

const reader: RequestReader<Req> = {
  method: () => 'POST',
  header: (r, name) => (name === 'idempotency-key' ? r.key : undefined),
  path: () => '/charges',
  contentType: () => 'application/json',
  readBody: (r, limit) => {
    const body = Buffer.from(r.body);
    if (body.byteLength > limit) throw new BodyTooLargeError(limit);
    return { body };
  },
};

/** What a client got: a fresh answer, a replay, or a problem. */
type Outcome = { readonly kind: 'executed' | 'replayed'; readonly status: number; readonly body: string; readonly headers: ReadonlyMap<string, string> } | { readonly kind: 'problem'; readonly status: number; readonly detail: string };

/** A service: an engine and a handler that writes one "business row" per execution. */
class Service {
  readonly engine: IdempotencyEngine<Req>;
  readonly rows: string[] = [];
  /** Handlers wait on this before answering, when set (the in-flight cases). */
  gate: Promise<void> | undefined;
  /** Told when a handler starts. */
  onStart: (() => void) | undefined;
  constructor(
    readonly name: string,
    options: EngineOptions<Req>,
    private readonly answerHeaders: ReadonlyArray<readonly [string, string]> = [['content-type', 'application/json']],
  ) {
    this.engine = new IdempotencyEngine<Req>({ onError: () => {}, ...options });
  }

  async send(request: Req): Promise<Outcome> {
    const decision: Decision<Req, RequestBody<Req>> = await this.engine.decide(request, reader);
    switch (decision.kind) {
      case 'replay': {
        const { response } = decision;
        return { kind: 'replayed', status: response.status, body: Buffer.from(response.body ?? []).toString(), headers: new Map(response.headers) };
      }
      case 'reject':
        return { kind: 'problem', status: decision.error.status, detail: decision.error.detail };
      case 'pass':
        throw new Error('unexpected pass');
      case 'execute': {
        this.rows.push(`${request.tenant}/${request.key}`);
        this.onStart?.();
        if (this.gate) await this.gate;
        const body = JSON.stringify({ by: this.name, n: this.rows.length });
        const refused = await decision.execution.finish(201, this.answerHeaders, Buffer.from(body));
        if (refused) return { kind: 'problem', status: refused.status, detail: refused.detail };
        return { kind: 'executed', status: 201, body, headers: new Map(this.answerHeaders) };
      }
    }
  }
}

const byTenant = (r: Req) => r.tenant;
const charge = (tenant: string, key: string, amount = 100, extra: Record<string, unknown> = {}): Req => ({
  tenant,
  key,
  body: JSON.stringify({ amount, ...extra }),
});

function gate() {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('item 8: a changed scope hook', () => {
  it('without previousScope, the retry through the new hook runs again (what the JSDoc and docs warn about)', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const before = new Service('before', { store });
    const after = new Service('after', { store, scope: byTenant });
    for (let i = 0; i < 20; i++) expect((await before.send(charge('t1', `k${i}`))).kind).toBe('executed');
    for (let i = 0; i < 20; i++) expect((await after.send(charge('t1', `k${i}`))).kind).toBe('executed');
    expect(before.rows.length + after.rows.length).toBe(40);
    store.close();
  });

  it('with previousScope, a record completed under the old scope is replayed: one execution per key', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const before = new Service('before', { store });
    const after = new Service('after', { store, scope: byTenant, previousScope: () => '' });
    const first: Outcome[] = [];
    for (let i = 0; i < 100; i++) first.push(await before.send(charge('t1', `k${i}`)));
    for (let i = 0; i < 100; i++) {
      const retry = await after.send(charge('t1', `k${i}`));
      expect(retry).toMatchObject({ kind: 'replayed', status: 201, body: (first[i] as { body: string }).body });
    }
    expect(before.rows).toHaveLength(100);
    expect(after.rows).toHaveLength(0);
    // Nothing was left claimed under the new scope: once the old hook is gone, the key is new there.
    expect(await store.get({ scope: 't1', key: 'k0' })).toBeUndefined();
    store.close();
  });

  it('answers 409 while the old instance still runs it, and 422 for another payload under the old scope', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const before = new Service('before', { store });
    const after = new Service('after', { store, scope: byTenant, previousScope: () => '' });
    const running = gate();
    const started = gate();
    before.gate = running.promise;
    before.onStart = started.open;
    const original = before.send(charge('t1', 'k'));
    await started.promise;
    await expect(after.send(charge('t1', 'k'))).resolves.toMatchObject({ kind: 'problem', status: 409 });
    running.open();
    await expect(original).resolves.toMatchObject({ kind: 'executed' });
    await expect(after.send(charge('t1', 'k', 999))).resolves.toMatchObject({ kind: 'problem', status: 422 });
    await expect(after.send(charge('t1', 'k'))).resolves.toMatchObject({ kind: 'replayed', status: 201 });
    expect(before.rows).toHaveLength(1);
    expect(after.rows).toHaveLength(0);
    expect(await store.get({ scope: 't1', key: 'k' })).toBeUndefined();
    store.close();
  });

  it('a new key runs once under the new scope, and the old scope holds it meanwhile: old instances answer 409, then replay', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const before = new Service('before', { store });
    const after = new Service('after', { store, scope: byTenant, previousScope: () => '' });
    const running = gate();
    const started = gate();
    after.gate = running.promise;
    after.onStart = started.open;
    const original = after.send(charge('t1', 'k'));
    await started.promise;
    await expect(before.send(charge('t1', 'k'))).resolves.toMatchObject({ kind: 'problem', status: 409 });
    running.open();
    const answered = await original;
    expect(answered).toMatchObject({ kind: 'executed', status: 201 });
    await expect(before.send(charge('t1', 'k'))).resolves.toMatchObject({ kind: 'replayed', status: 201, body: (answered as { body: string }).body });
    await expect(after.send(charge('t1', 'k'))).resolves.toMatchObject({ kind: 'replayed', status: 201 });
    expect((await store.get({ scope: 't1', key: 'k' }))?.state).toBe('completed');
    expect((await store.get({ scope: '', key: 'k' }))?.state).toBe('completed');
    expect(before.rows.length + after.rows.length).toBe(1);
    store.close();
  });

  it('a discarded execution releases the old scope too, so the key is free everywhere', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine<Req>({ store, scope: byTenant, previousScope: () => '', onError: () => {} });
    const decision = await engine.decide(charge('t1', 'k'), reader);
    expect(decision.kind).toBe('execute');
    if (decision.kind !== 'execute') throw new Error('unreachable');
    decision.execution.context.discard();
    await decision.execution.finish(400, [], Buffer.from('no'));
    expect(await store.get({ scope: 't1', key: 'k' })).toBeUndefined();
    expect(await store.get({ scope: '', key: 'k' })).toBeUndefined();
    store.close();
  });

  it('takes over a record the old instance left in flight (lease over), under the old scope', async () => {
    const clock = manualClock();
    const store = memoryStore({ sweepIntervalMs: 0, clock: clock.now });
    const dead = new IdempotencyEngine<Req>({ store, leaseMs: 1_000, renewLease: false, onError: () => {} });
    const abandoned = await dead.decide(charge('t1', 'k'), reader);
    expect(abandoned.kind).toBe('execute');
    if (abandoned.kind === 'execute') await abandoned.execution.context.checkpoint('charged');
    await clock.advance(1_001);
    const after = new IdempotencyEngine<Req>({ store, scope: byTenant, previousScope: () => '', leaseMs: 1_000, onError: () => {} });
    const taken = await after.decide(charge('t1', 'k'), reader);
    expect(taken.kind).toBe('execute');
    if (taken.kind !== 'execute') throw new Error('unreachable');
    expect(taken.execution.context).toMatchObject({ scope: '', takeover: true, resumeFrom: 'charged' });
    await taken.execution.finish(201, [], Buffer.from('{}'));
    expect((await store.get({ scope: '', key: 'k' }))?.state).toBe('completed');
    expect(await store.get({ scope: 't1', key: 'k' })).toBeUndefined();
    store.close();
  });

  it('refuses a previousScope that is not a function, naming it, and an unusable previous scope with 400, claiming nothing', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    expect(() => new IdempotencyEngine<Req>({ store, previousScope: 'tenant' as never })).toThrow(InvalidOptionError);
    expect(() => new IdempotencyEngine<Req>({ store, previousScope: 'tenant' as never })).toThrow(/previousScope/);
    const engine = new IdempotencyEngine<Req>({ store, scope: byTenant, previousScope: () => '\u001fx', onError: () => {} });
    const decision = await engine.decide(charge('t1', 'k'), reader);
    expect(decision.kind === 'reject' && decision.error).toBeInstanceOf(InvalidScopeError);
    expect(decision.kind === 'reject' && decision.error.message).toMatch(/`previousScope` hook/);
    expect(await store.get({ scope: 't1', key: 'k' })).toBeUndefined();
    store.close();
  });
});

describe('item 8 on PostgreSQL: an old and a new instance race for the same keys', () => {
  const pools = [newPool({ max: 6 }), newPool({ max: 6 })];
  const table = uniqueTable();
  let stores: IdempotencyStore[];
  beforeAll(async () => {
    stores = pools.map((pool) => postgresStore({ pool, table }));
    await (stores[0] as ReturnType<typeof postgresStore>).migrate();
  });
  afterAll(async () => {
    await dropTable(pools[0]!, table);
    await Promise.all(pools.map((pool) => pool.end()));
  });

  it('two concurrent retries, one through each instance, never both execute (60 keys)', async () => {
    const before = new Service('before', { store: stores[0]! });
    const after = new Service('after', { store: stores[1]!, scope: byTenant, previousScope: () => '' });
    const keys = Array.from({ length: 60 }, (_, i) => `race-${i}`);
    // The new instance claims twice where the old one claims once: the old request is held back by
    // 0–3 store round trips (by key), so that the pairs' claims interleave every way, not by a clock.
    const later = async (trips: number) => {
      for (let i = 0; i < trips; i++) await pools[0]!.query('SELECT 1');
    };
    const outcomes = await Promise.all(
      keys.map((key, i) => Promise.all([later(i % 4).then(() => before.send(charge('t1', key))), after.send(charge('t1', key))])),
    );
    const executed = [...before.rows, ...after.rows];
    // Every key ran exactly once, on one side or the other; the other request got 409 or the replay.
    expect(executed.toSorted()).toEqual(keys.map((key) => `t1/${key}`).toSorted());
    for (const pair of outcomes) {
      expect(pair.filter((o) => o.kind === 'executed')).toHaveLength(1);
      for (const o of pair) expect(o.kind === 'executed' || o.kind === 'replayed' || (o.kind === 'problem' && o.status === 409)).toBe(true);
    }
    // Afterwards, a retry through either instance replays.
    for (const key of keys.slice(0, 10)) {
      await expect(before.send(charge('t1', key))).resolves.toMatchObject({ kind: 'replayed' });
      await expect(after.send(charge('t1', key))).resolves.toMatchObject({ kind: 'replayed' });
    }
    expect(before.rows.length + after.rows.length).toBe(60);
  });
});

describe('item 8: previousScope in transactional mode and with inFlight: wait', () => {
  const pool = newPool({ max: 4 });
  const table = uniqueTable();
  let store: ReturnType<typeof postgresStore>;
  beforeAll(async () => {
    store = postgresStore({ pool, table });
    await store.migrate();
  });
  afterAll(async () => {
    await dropTable(pool, table);
    await pool.end();
  });

  it('the old scope gets the committed answer after the transaction commits; a rolled-back one releases both', async () => {
    const after = new Service('after', { store, scope: byTenant, previousScope: () => '', transactional: true });
    const before = new Service('before', { store });
    const first = await after.send(charge('t1', 'tx-k'));
    expect(first.kind).toBe('executed');
    await expect(before.send(charge('t1', 'tx-k'))).resolves.toMatchObject({ kind: 'replayed', body: (first as { body: string }).body });
    expect((await store.get({ scope: '', key: 'tx-k' }))?.state).toBe('completed');
    // A 5xx rolls back: nothing is kept under either scope.
    const failing = new IdempotencyEngine<Req>({ store, scope: byTenant, previousScope: () => '', transactional: true, onError: () => {} });
    const decision = await failing.decide(charge('t1', 'tx-fail'), reader);
    if (decision.kind !== 'execute') throw new Error(`expected execute, got ${decision.kind}`);
    await decision.execution.finish(500, [], Buffer.from('boom'));
    expect(await store.get({ scope: 't1', key: 'tx-fail' })).toBeUndefined();
    expect(await store.get({ scope: '', key: 'tx-fail' })).toBeUndefined();
    expect(before.rows.length + after.rows.length).toBe(1);
  });

  it("with inFlight: 'wait', a retry through the new hook waits for the old instance's run and replays it", async () => {
    // The new instance's store tells when one of its claims found the old scope's record in flight.
    const seenInFlight = gate();
    const watched: IdempotencyStore = Object.assign(Object.create(store) as IdempotencyStore, {
      claim: async (...args: Parameters<IdempotencyStore['claim']>) => {
        const claim = await store.claim(...args);
        if (args[0].scope === '' && claim.kind === 'in_flight') seenInFlight.open();
        return claim;
      },
    });
    const before = new Service('before', { store });
    const after = new Service('after', { store: watched, scope: byTenant, previousScope: () => '', inFlight: 'wait', waitTimeoutMs: 10_000 });
    const running = gate();
    const started = gate();
    before.gate = running.promise;
    before.onStart = started.open;
    const original = before.send(charge('t1', 'wait-k'));
    await started.promise;
    const waiting = after.send(charge('t1', 'wait-k'));
    await seenInFlight.promise;
    running.open();
    const [first, retry] = await Promise.all([original, waiting]);
    expect(retry).toMatchObject({ kind: 'replayed', status: 201, body: (first as { body: string }).body });
    expect(before.rows.length + after.rows.length).toBe(1);
    expect(await store.get({ scope: 't1', key: 'wait-k' })).toBeUndefined();
  });
});

describe('item 9: a changed fingerprintFields', () => {
  it('stores fields fingerprints as v2:<digest>:<hex> (order of the list does not matter), whole-body ones as v2:<hex>', () => {
    const input = { method: 'POST', path: '/charges', contentType: 'application/json', body: Buffer.from('{"amount":1,"ts":2}') };
    expect(fingerprint(input)).toMatch(/^v2:[0-9a-f]{64}$/);
    const fields = fingerprint(input, { fields: ['amount', 'currency'] });
    expect(fields).toMatch(/^v2:[0-9a-f]{16}:[0-9a-f]{64}$/);
    expect(fingerprint(input, { fields: ['currency', 'amount'] })).toBe(fields);
    expect(fingerprint(input, { fields: ['amount'] }).slice(0, 20)).not.toBe(fields.slice(0, 20));
  });

  it('whole body → fields: the new instance checks the retry by the whole body, as the record was made; another body is still 422', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const before = new Service('before', { store });
    const after = new Service('after', { store, fingerprintFields: ['amount'] });
    for (let i = 0; i < 100; i++) await before.send(charge('t', `k${i}`, 100, { ts: 1 }));
    for (let i = 0; i < 100; i++) await expect(after.send(charge('t', `k${i}`, 100, { ts: 1 }))).resolves.toMatchObject({ kind: 'replayed', status: 201 });
    // Equal by the new settings (same amount), different by the record's (ts changed): not the same request.
    const changed = await after.send(charge('t', 'k0', 100, { ts: 2 }));
    expect(changed).toMatchObject({ kind: 'problem', status: 422, detail: new KeyMismatchError().detail });
    expect(before.rows).toHaveLength(100);
    expect(after.rows).toHaveLength(0);
    store.close();
  });

  it('fields → whole body: 422 naming the cause without previousFingerprintFields; replayed with it', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const before = new Service('before', { store, fingerprintFields: ['amount'] });
    const plain = new Service('plain', { store });
    const migrating = new Service('migrating', { store, previousFingerprintFields: ['amount'] });
    for (let i = 0; i < 100; i++) await before.send(charge('t', `k${i}`, 100, { ts: i }));
    const unknown = await plain.send(charge('t', 'k0', 100, { ts: 0 }));
    expect(unknown).toMatchObject({ kind: 'problem', status: 422 });
    expect((unknown as { detail: string }).detail).toMatch(/fingerprint settings/);
    for (let i = 0; i < 100; i++) {
      // A volatile field changed: the same request by the record's own settings, as it was for `before`.
      await expect(migrating.send(charge('t', `k${i}`, 100, { ts: i + 1 }))).resolves.toMatchObject({ kind: 'replayed', status: 201 });
    }
    // A different amount is a different request by every measure.
    await expect(migrating.send(charge('t', 'k0', 101))).resolves.toMatchObject({ kind: 'problem', status: 422, detail: new KeyMismatchError().detail });
    expect(plain.rows.length + migrating.rows.length).toBe(0);
    store.close();
  });

  it('reads a fields record written before the form named its fields (bare v2:<hex>) with the field lists it knows', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const request = charge('t', 'legacy', 100, { ts: 1 });
    const made = fingerprint({ method: 'POST', path: '/charges', contentType: 'application/json', body: Buffer.from(request.body) }, { fields: ['amount'] });
    const legacy = `v2:${made.slice(made.lastIndexOf(':') + 1)}`;
    const claim = await store.claim({ scope: '', key: 'legacy' }, legacy, { leaseMs: 1_000, windowMs: 60_000 });
    if (claim.kind !== 'acquired') throw new Error('expected a new claim');
    await store.complete({ scope: '', key: 'legacy' }, claim.token, { status: 201, headers: [], body: Buffer.from('old'), bodyOmitted: false });
    const after = new Service('after', { store, fingerprintFields: ['amount'] });
    await expect(after.send({ ...request, body: JSON.stringify({ amount: 100, ts: 9 }) })).resolves.toMatchObject({ kind: 'replayed', body: 'old' });
    await expect(after.send({ ...request, body: JSON.stringify({ amount: 5 }) })).resolves.toMatchObject({ kind: 'problem', status: 422 });
    expect(after.rows).toHaveLength(0);
    store.close();
  });

  it('a take-over of an abandoned record made with other settings keeps its fingerprint', async () => {
    const clock = manualClock();
    const store = memoryStore({ sweepIntervalMs: 0, clock: clock.now });
    const dead = new IdempotencyEngine<Req>({ store, fingerprintFields: ['amount'], leaseMs: 1_000, renewLease: false, onError: () => {} });
    expect((await dead.decide(charge('t', 'k', 100, { ts: 1 }), reader)).kind).toBe('execute');
    const stored = (await store.get({ scope: '', key: 'k' }))!.fingerprint;
    await clock.advance(1_001);
    const after = new IdempotencyEngine<Req>({ store, previousFingerprintFields: ['amount'], leaseMs: 1_000, onError: () => {} });
    const taken = await after.decide(charge('t', 'k', 100, { ts: 2 }), reader);
    expect(taken.kind === 'execute' && taken.execution.context.takeover).toBe(true);
    expect((await store.get({ scope: '', key: 'k' }))!.fingerprint).toBe(stored);
    store.close();
  });

  it('refuses a previousFingerprintFields that is not a non-empty list, naming it', () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    expect(() => new IdempotencyEngine<Req>({ store, previousFingerprintFields: [] })).toThrow(/previousFingerprintFields/);
    store.close();
  });
});

describe('item 9: the stored fingerprint round-trips through SQL stores', () => {
  const pool = newPool({ max: 4 });
  const table = uniqueTable();
  const mysql = createPool({ host: '127.0.0.1', port: 3306, user: 'root', database: 'test', connectionLimit: 4 });
  afterAll(async () => {
    await dropTable(pool, table);
    await pool.end();
    await mysql.query(`DROP TABLE IF EXISTS \`${table}\``);
    await mysql.end();
  });

  it.each([
    ['PostgreSQL', async () => {
      const store = postgresStore({ pool, table });
      await store.migrate();
      return store as IdempotencyStore;
    }],
    ['SQLite', async () => sqliteStore({ database: openSqlite(':memory:') }) as IdempotencyStore],
    ['MariaDB', async () => {
      // Its fingerprint column is VARBINARY(255): the longer form (84 bytes) must fit and compare byte for byte.
      const store = mysqlStore({ pool: mysql, table });
      await store.migrate();
      return store as IdempotencyStore;
    }],
  ])('%s: a record made with fingerprintFields is replayed by an instance that knows them as previous, and 422 names the cause elsewhere', async (_name, open) => {
    const store = await open();
    const before = new Service('before', { store, fingerprintFields: ['amount', 'customer.id'] });
    const after = new Service('after', { store, previousFingerprintFields: ['customer.id', 'amount'] });
    const plain = new Service('plain', { store });
    const first = await before.send(charge('t', 'sql-k', 100, { customer: { id: 'c1' }, ts: 1 }));
    expect(first.kind).toBe('executed');
    const stored = (await store.get({ scope: '', key: 'sql-k' }))!.fingerprint;
    expect(stored).toMatch(/^v2:[0-9a-f]{16}:[0-9a-f]{64}$/);
    await expect(after.send(charge('t', 'sql-k', 100, { customer: { id: 'c1' }, ts: 2 }))).resolves.toMatchObject({
      kind: 'replayed',
      body: (first as { body: string }).body,
    });
    const unknown = await plain.send(charge('t', 'sql-k', 100, { customer: { id: 'c1' }, ts: 1 }));
    expect(unknown).toMatchObject({ kind: 'problem', status: 422 });
    expect((unknown as { detail: string }).detail).toMatch(/fingerprint settings/);
    await expect(after.send(charge('t', 'sql-k', 100, { customer: { id: 'c2' } }))).resolves.toMatchObject({ kind: 'problem', status: 422 });
    expect(before.rows.length + after.rows.length + plain.rows.length).toBe(1);
  });
});

describe('item 10: what instances with other windows and replay headers share', () => {
  it('the claimer\'s window is the record\'s: a retry through a longer-window instance after it runs again', async () => {
    const clock = manualClock();
    const store = memoryStore({ sweepIntervalMs: 0, clock: clock.now });
    const short = new Service('short', { store, windowMs: 60_000, leaseMs: 1_000 });
    const long = new Service('long', { store, windowMs: 86_400_000, leaseMs: 1_000 });
    await short.send(charge('t', 'k'));
    await clock.advance(60_001);
    await expect(long.send(charge('t', 'k'))).resolves.toMatchObject({ kind: 'executed' });
    expect(short.rows.length + long.rows.length).toBe(2);
    store.close();
  });

  it('the replay carries the headers the executing instance kept, whatever the replaying one lists', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const answer: ReadonlyArray<readonly [string, string]> = [['content-type', 'application/json'], ['x-charge-id', 'ch_1'], ['x-other', 'o']];
    const keeps = new Service('keeps', { store, replayHeaders: ['x-charge-id'] }, answer);
    const lists = new Service('lists', { store, replayHeaders: ['x-other'] }, answer);
    await keeps.send(charge('t', 'k'));
    const replay = await lists.send(charge('t', 'k'));
    expect(replay.kind === 'replayed' && [...replay.headers.keys()].toSorted()).toEqual(['content-type', 'x-charge-id']);
    store.close();
  });

  it('docs/semantics.md says both where users read about mixed deployments', () => {
    const doc = readFileSync(new URL('../../docs/semantics.md', import.meta.url), 'utf8');
    const section = doc.slice(doc.indexOf('## Mixed deployments'), doc.indexOf('## Windows and leases'));
    expect(section).toContain('**The shortest\n`windowMs` among the instances is the retention a client can count on.**');
    expect(section).toContain('**a replay carries the headers the executing instance kept**');
    expect(section).toContain('**the handler runs again**');
  });
});
