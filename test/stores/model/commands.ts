/**
 * The commands of the model-based test: each runs one store operation on the real store and on
 * the model (model.ts), and checks that the store answered what the contract says it must.
 */
import fc from 'fast-check';
import { expect } from 'vitest';
import { LeaseLostError } from '../../../src/core/errors.js';
import type { IdempotencyRecord, IdempotencyStore, StoredResponse } from '../../../src/core/store.js';
import { canListAbandoned, hasAdmin, isTransactionalStore } from '../../../src/core/store.js';
import type { ModelHarness } from './harness.js';
import type { BodyKind, CallTime, Stamp, StoreModel } from './model.js';
import { BODY_KINDS, DATA, FINGERPRINTS, HEADER_SETS, POINTS, REFS, STATUSES, body } from './model.js';

export interface Real {
  readonly store: IdempotencyStore;
  readonly harness: ModelHarness;
}

type Command = fc.AsyncCommand<StoreModel, Real>;

/** How often each outcome was reached, for IDEMKIT_MODEL_STATS=1 (is the test reaching the cases it should?). */
export const reached = new Map<string, number>();
const reach = (what: string) => reached.set(what, (reached.get(what) ?? 0) + 1);

/** Which token a fenced operation sends: one of this ref's (0 = the latest), anyone's, or one never handed out. */
export interface TokenPick {
  readonly from: 'own' | 'any' | 'forged';
  readonly index: number;
}

const FORGED = '0123456789abcdef'.repeat(2);
const describeRef = (i: number) => `#${i}${JSON.stringify(REFS[i])}`;
const describePick = (p: TokenPick) => (p.from === 'forged' ? 'forged token' : `${p.from} token [${p.index}]`);

/** The token sent: this ref's own tokens when it has any, else anyone's, else (and for 'forged') one never handed out. */
function tokenOf(m: StoreModel, i: number, pick: TokenPick): string {
  const own = m.tokens.filter((t) => t.ref === i);
  const pool = pick.from === 'own' && own.length > 0 ? own : m.tokens;
  if (pick.from === 'forged' || pool.length === 0) return FORGED;
  return pool[pool.length - 1 - (pick.index % pool.length)]!.token;
}

/** Runs one store call, reading the store's clock just before and just after it. */
async function timed<T>(real: Real, call: () => Promise<T>): Promise<[T, CallTime]> {
  const before = real.harness.clock();
  const result = await call();
  return [result, { before, after: real.harness.clock() }];
}

/**
 * Whether the call decided on the model's time: every deadline the model says is still ahead must
 * still have been ahead on the store's clock when the call returned. On a set clock it always is;
 * on a running one, a loaded machine can make commands outlast a short lease, and then the store
 * rightly decided otherwise than the model: the run is discarded (fc.pre), neither passed nor failed.
 */
function inStep(m: StoreModel, real: Real, at: CallTime): void {
  fc.pre(m.deadlines().every((d) => d.v <= m.now || at.after < d.lo - 2));
}

/**
 * `actual`, a time or duration the store reports, lies between `lo` and `hi`, which come from
 * store-clock readings taken around the calls involved, give or take 2 ms of the store's rounding
 * (PostgreSQL floors µs to ms, Redis derives times from PTTL). Not a time limit: a slow machine
 * widens the interval instead of failing the assertion.
 */
function expectBetweenReadings(actual: number, lo: number, hi: number, what: string): void {
  expect(actual, what).toBeGreaterThanOrEqual(lo - 2);
  expect(actual, what).toBeLessThanOrEqual(hi + 2);
}

/** A time the store reports: exactly the deadline (or stamp) on a set clock, else within the bounds measured when it was set. */
function expectTime(real: Real, actual: number, d: Stamp, what: string): void {
  if (real.harness.exactClock) expect(actual, what).toBe(d.lo);
  else expectBetweenReadings(actual, d.lo, d.hi, what);
}

function expectResponse(actual: StoredResponse, expected: StoredResponse): void {
  expect(actual.status).toBe(expected.status);
  expect(actual.headers).toEqual(expected.headers);
  expect(actual.bodyOmitted).toBe(expected.bodyOmitted);
  if (expected.body === null) {
    expect(actual.body).toBeNull();
  } else {
    expect(actual.body).not.toBeNull();
    expect(Buffer.from(actual.body!).toString('hex')).toBe(Buffer.from(expected.body).toString('hex'));
  }
}

/** Runs a fenced write and checks it was taken or refused as the model says; returns when it ran. */
async function expectFenced(m: StoreModel, what: string, operation: () => Promise<unknown>, allowed: boolean, real: Real): Promise<CallTime> {
  const [error, at] = await timed(real, () =>
    operation().then(
      () => undefined,
      (e: unknown) => e,
    ),
  );
  inStep(m, real, at);
  reach(`fenced ${what} ${allowed ? 'allowed' : 'refused'}`);
  if (allowed) expect(error).toBeUndefined();
  else expect(error).toBeInstanceOf(LeaseLostError);
  return at;
}

class ClaimCommand implements Command {
  constructor(
    readonly ref: number,
    readonly fingerprint: string,
    readonly leaseUnits: number,
    readonly windowUnits: number,
  ) {}
  check = () => true;
  async run(m: StoreModel, real: Real): Promise<void> {
    const unit = real.harness.unitMs;
    const [leaseMs, windowMs] = [this.leaseUnits * unit, this.windowUnits * unit];
    const expected = m.claim(this.ref, this.fingerprint);
    const [got, at] = await timed(real, () => real.store.claim(REFS[this.ref]!, this.fingerprint, { leaseMs, windowMs }));
    inStep(m, real, at);
    expect(got.kind, 'claim outcome').toBe(expected.kind);
    reach(`claim ${expected.kind}${expected.kind === 'acquired' && expected.takeover ? ' takeover' : ''}${expected.kind === 'acquired' && expected.resumeFrom !== undefined ? ' resuming' : ''}${expected.kind === 'completed' && expected.response.bodyOmitted ? ' body omitted' : ''}`);
    if (got.kind === 'acquired' && expected.kind === 'acquired') {
      expect(got.token).toMatch(/^[0-9a-f]{32}$/);
      expect(m.tokens.map((t) => t.token)).not.toContain(got.token);
      expect(got.takeover, 'takeover').toBe(expected.takeover);
      expect(got.resumeFrom, 'resumeFrom').toEqual(expected.resumeFrom);
      expect(got.recoveryData, 'recoveryData').toEqual(expected.recoveryData);
      m.acquire(this.ref, this.fingerprint, got.token, leaseMs, windowMs, at);
    } else if (got.kind === 'completed' && expected.kind === 'completed') {
      expectResponse(got.response, expected.response);
    } else if (got.kind === 'in_flight' && expected.kind === 'in_flight') {
      if (real.harness.exactClock) expect(got.retryAfterMs, 'retryAfterMs').toBe(expected.retryAfterMs);
      else {
        // What was left of the lease some time during this call: at least its earliest end less
        // the latest reading of this call, at most its latest end less the earliest reading.
        const lease = m.records.get(this.ref)!.lease;
        expect(got.retryAfterMs).toBeGreaterThan(0);
        expectBetweenReadings(got.retryAfterMs, lease.lo - at.after, lease.hi - at.before, 'retryAfterMs');
      }
    }
  }
  toString(): string {
    return `claim(${describeRef(this.ref)}, ${this.fingerprint}, lease ${this.leaseUnits}u, window ${this.windowUnits}u)`;
  }
}

class RenewCommand implements Command {
  constructor(
    readonly ref: number,
    readonly pick: TokenPick,
    readonly leaseUnits: number,
  ) {}
  check = () => true;
  async run(m: StoreModel, real: Real): Promise<void> {
    const leaseMs = this.leaseUnits * real.harness.unitMs;
    const token = tokenOf(m, this.ref, this.pick);
    const expected = m.owned(this.ref, token) !== undefined;
    const [got, at] = await timed(real, () => real.store.renew(REFS[this.ref]!, token, leaseMs));
    inStep(m, real, at);
    expect(got, 'renew').toBe(expected);
    m.renew(this.ref, token, leaseMs, at);
    reach(`renew ${expected}`);
  }
  toString(): string {
    return `renew(${describeRef(this.ref)}, ${describePick(this.pick)}, lease ${this.leaseUnits}u)`;
  }
}

class CheckpointCommand implements Command {
  constructor(
    readonly ref: number,
    readonly pick: TokenPick,
    readonly point: string,
    readonly data: unknown,
  ) {}
  check = () => true;
  async run(m: StoreModel, real: Real): Promise<void> {
    const token = tokenOf(m, this.ref, this.pick);
    const allowed = m.checkpoint(this.ref, token, this.point, this.data);
    const at = await expectFenced(m, 'checkpoint', () => real.store.checkpoint(REFS[this.ref]!, token, this.point, this.data), allowed, real);
    if (allowed) m.touch(this.ref, at);
  }
  toString(): string {
    return `checkpoint(${describeRef(this.ref)}, ${describePick(this.pick)}, ${JSON.stringify(this.point)}, ${JSON.stringify(this.data)})`;
  }
}

class CompleteCommand implements Command {
  constructor(
    readonly ref: number,
    readonly pick: TokenPick,
    readonly status: number,
    readonly headers: number,
    readonly body: BodyKind,
  ) {}
  check = () => true;
  async run(m: StoreModel, real: Real): Promise<void> {
    const token = tokenOf(m, this.ref, this.pick);
    const bytes = body(this.body, m.maxResponseBytes);
    const response: StoredResponse = { status: this.status, headers: HEADER_SETS[this.headers]!, body: bytes, bodyOmitted: bytes === null };
    const allowed = m.complete(this.ref, token, response);
    const at = await expectFenced(m, 'complete', () => real.store.complete(REFS[this.ref]!, token, response), allowed, real);
    if (allowed) m.touch(this.ref, at);
  }
  toString(): string {
    return `complete(${describeRef(this.ref)}, ${describePick(this.pick)}, ${this.status}, headers ${JSON.stringify(HEADER_SETS[this.headers])}, body ${this.body})`;
  }
}

class ReleaseCommand implements Command {
  constructor(
    readonly ref: number,
    readonly pick: TokenPick,
  ) {}
  check = () => true;
  async run(m: StoreModel, real: Real): Promise<void> {
    const token = tokenOf(m, this.ref, this.pick);
    const allowed = m.release(this.ref, token);
    await expectFenced(m, 'release', () => real.store.release(REFS[this.ref]!, token), allowed, real);
  }
  toString(): string {
    return `release(${describeRef(this.ref)}, ${describePick(this.pick)})`;
  }
}

/**
 * A fenced write inside the store's transaction (transactional mode): it takes effect on commit
 * only, and a stale token is refused inside the transaction as outside it.
 */
class TransactionCommand implements Command {
  constructor(
    readonly ref: number,
    readonly pick: TokenPick,
    readonly write: 'complete' | 'checkpoint',
    readonly end: 'commit' | 'rollback',
    readonly body: BodyKind,
    readonly point: string,
  ) {}
  check = () => true;
  async run(m: StoreModel, real: Real): Promise<void> {
    const store = real.store;
    if (!isTransactionalStore(store)) throw new Error(`${store.name} has no transactions: leave TransactionCommand out`);
    const token = tokenOf(m, this.ref, this.pick);
    const ref = REFS[this.ref]!;
    const bytes = body(this.body, m.maxResponseBytes);
    const response: StoredResponse = { status: 201, headers: HEADER_SETS[1]!, body: bytes, bodyOmitted: bytes === null };
    const allowed = m.owned(this.ref, token) !== undefined;
    const tx = await store.beginTransaction();
    let at: CallTime | undefined;
    try {
      const write = () => (this.write === 'complete' ? tx.complete(ref, token, response) : tx.checkpoint(ref, token, this.point, { in: 'tx' }));
      at = await expectFenced(m, `transaction ${this.write}`, write, allowed, real);
    } finally {
      if (this.end === 'commit') await tx.commit();
      else await tx.rollback();
    }
    if (allowed && this.end === 'commit') {
      if (this.write === 'complete') m.complete(this.ref, token, response);
      else m.checkpoint(this.ref, token, this.point, { in: 'tx' });
      // The write's time (its statement ran then), not the commit's.
      m.touch(this.ref, at);
    }
  }
  toString(): string {
    return `transaction(${describeRef(this.ref)}, ${describePick(this.pick)}, ${this.write}${this.write === 'complete' ? ` body ${this.body}` : ` ${JSON.stringify(this.point)}`}, ${this.end})`;
  }
}

/** A record as `get` or `listAbandoned` returns it, or as `admin.inspect` shows it (times `null` there when unknown). */
type ShownRecord = Omit<IdempotencyRecord, 'createdAt' | 'updatedAt'> & {
  readonly createdAt?: number | null | undefined;
  readonly updatedAt?: number | null | undefined;
};

function expectRecord(real: Real, got: ShownRecord | undefined, m: StoreModel, i: number): void {
  const r = m.records.get(i);
  if (r === undefined) {
    expect(got, 'get: no record').toBeUndefined();
    return;
  }
  expect(got, 'get: a record').toBeDefined();
  reach(`get ${r.state}${m.expired(r) ? ' expired' : ''}`);
  expect(got).toMatchObject({ scope: r.ref.scope, key: r.ref.key, state: r.state, fingerprint: r.fingerprint });
  expect(got!.recoveryPoint, 'recoveryPoint').toEqual(r.recoveryPoint);
  expect(got!.recoveryData, 'recoveryData').toEqual(r.recoveryData);
  expectTime(real, got!.leaseUntil, r.lease, 'leaseUntil');
  expectTime(real, got!.expiresAt, r.expires, 'expiresAt');
  // Every record of a run was written by this idemkit: its times are known.
  expect(got!.createdAt, 'createdAt').toBeTypeOf('number');
  expect(got!.updatedAt, 'updatedAt').toBeTypeOf('number');
  expectTime(real, got!.createdAt!, r.created, 'createdAt');
  expectTime(real, got!.updatedAt!, r.updated, 'updatedAt');
  if (r.response === undefined) expect(got!.response, 'response of a record in flight').toBeUndefined();
  else expectResponse(got!.response!, r.response);
}

class GetCommand implements Command {
  constructor(readonly ref: number) {}
  check = () => true;
  async run(m: StoreModel, real: Real): Promise<void> {
    const [got, at] = await timed(real, () => real.store.get(REFS[this.ref]!));
    inStep(m, real, at);
    expectRecord(real, got, m, this.ref);
  }
  toString(): string {
    return `get(${describeRef(this.ref)})`;
  }
}

class ReapCommand implements Command {
  constructor(readonly limit: number) {}
  check = () => true;
  async run(m: StoreModel, real: Real): Promise<void> {
    const reapable = m.reapable();
    const [n, at] = await timed(real, () => real.store.reap(this.limit));
    inStep(m, real, at);
    // The store's table or prefix holds this run's records only: it reaps all it may, up to the limit.
    expect(n, `reap(${this.limit}) with ${reapable.length} expired`).toBe(Math.min(this.limit, reapable.length));
    // Which ones went: exactly n of the expired ones, and nothing else (later gets check the rest).
    let gone = 0;
    for (const i of reapable) {
      if ((await real.store.get(REFS[i]!)) === undefined) {
        m.records.delete(i);
        gone++;
      }
    }
    expect(gone, 'expired records reaped').toBe(n);
    reach(n > 0 ? 'reap some' : reapable.length > 0 ? 'reap none of some' : 'reap none');
  }
  toString(): string {
    return `reap(${this.limit})`;
  }
}

/** `admin.inspect` (every built-in store has it): the record as `get` shows it, and its attempt, owner token prefix and expiry. */
class InspectCommand implements Command {
  constructor(readonly ref: number) {}
  check = () => true;
  async run(m: StoreModel, real: Real): Promise<void> {
    const store = real.store;
    if (!hasAdmin(store)) return;
    const [got, at] = await timed(real, () => store.admin.inspect(REFS[this.ref]!));
    inStep(m, real, at);
    expectRecord(real, got, m, this.ref);
    const r = m.records.get(this.ref);
    if (r === undefined || got === undefined) return;
    reach(`inspect attempt ${Math.min(r.attempt, 3)}`);
    expect(got.attempt, 'attempt').toBe(r.attempt);
    expect(got.expired, 'expired').toBe(m.expired(r));
    if (r.state === 'in_flight') expect(got.tokenPrefix, 'tokenPrefix').toBe(r.token.slice(0, 8));
    else expect(got.tokenPrefix.length).toBeLessThanOrEqual(8);
    expectBetweenReadings(got.now, at.before, at.after, 'now');
  }
  toString(): string {
    return `admin.inspect(${describeRef(this.ref)})`;
  }
}

/** `listAbandoned` (the stores that have it): exactly the records in flight whose lease is over inside their window, oldest lease first. */
class ListAbandonedCommand implements Command {
  check = () => true;
  async run(m: StoreModel, real: Real): Promise<void> {
    const store = real.store;
    if (!canListAbandoned(store)) return;
    const [got, at] = await timed(real, () => store.listAbandoned(1000));
    inStep(m, real, at);
    const expected = m.abandoned();
    reach(`listAbandoned ${Math.min(expected.length, 2)}`);
    const id = (r: { scope: string; key: string }) => JSON.stringify([r.scope, r.key]);
    expect(got.map(id).sort()).toEqual(expected.map((r) => id(r.ref)).sort());
    for (let i = 1; i < got.length; i++) expect(got[i]!.leaseUntil).toBeGreaterThanOrEqual(got[i - 1]!.leaseUntil);
    for (const record of got) expectRecord(real, record, m, REFS.findIndex((ref) => id(ref) === id(record)));
  }
  toString(): string {
    return 'listAbandoned(1000)';
  }
}

class JumpCommand implements Command {
  constructor(
    readonly units: number,
    private readonly maxJumps: number,
  ) {}
  check = (m: Readonly<StoreModel>) => m.jumps < this.maxJumps;
  async run(m: StoreModel, real: Real): Promise<void> {
    const ms = this.units * real.harness.unitMs;
    m.now += ms;
    m.jumps++;
    await real.harness.advance(ms, m);
  }
  toString(): string {
    return `jump(${this.units}u)`;
  }
}

// Mostly the same key in two scopes ('' and 'tenant-a'), so that operations meet on one record.
const refOf = (count: number) => fc.oneof({ arbitrary: fc.constantFrom(0, 1), weight: 4 }, { arbitrary: fc.nat(count - 1), weight: 2 });
const pick: fc.Arbitrary<TokenPick> = fc.record({
  from: fc.constantFrom<TokenPick['from']>('own', 'own', 'own', 'own', 'any', 'forged'),
  index: fc.oneof({ arbitrary: fc.constant(0), weight: 3 }, { arbitrary: fc.nat(8), weight: 1 }),
});
/** Leases and windows in units; 100 units outlasts any run (and keeps Redis' replay fast path in play). */
const leaseUnits = fc.constantFrom(1, 1, 2, 3, 100);
const windowUnits = fc.constantFrom(1, 2, 4, 6, 100);

/**
 * The command arbitraries; a jump is refused past the harness's `maxJumps`; transactions only for
 * a transactional store; the ref whose scope holds NUL only for a store that keeps it.
 */
export function storeCommands(h: Pick<ModelHarness, 'maxJumps' | 'transactional' | 'keepsNul'>): Array<fc.Arbitrary<Command>> {
  const { maxJumps, transactional } = h;
  const ref = refOf(h.keepsNul ? REFS.length : REFS.length - 1);
  const claim = fc
    .tuple(ref, fc.constantFrom(FINGERPRINTS[0], FINGERPRINTS[0], FINGERPRINTS[0], FINGERPRINTS[1]), leaseUnits, windowUnits)
    .map(([r, fp, lease, window]) => new ClaimCommand(r, fp, lease, window));
  const complete = fc
    .tuple(ref, pick, fc.constantFrom(...STATUSES), fc.nat(HEADER_SETS.length - 1), fc.constantFrom(...BODY_KINDS))
    .map(([r, p, status, headers, b]) => new CompleteCommand(r, p, status, headers, b));
  const jump = fc.constantFrom(1, 2, 3).map((units) => new JumpCommand(units, maxJumps));
  const transaction = fc
    .tuple(ref, pick, fc.constantFrom('complete', 'checkpoint'), fc.constantFrom('commit', 'rollback'), fc.constantFrom(...BODY_KINDS), fc.constantFrom(...POINTS))
    .map(([r, p, write, end, b, point]) => new TransactionCommand(r, p, write, end, b, point));
  return [
    ...(transactional ? [transaction] : []),
    claim,
    claim,
    claim,
    complete,
    complete,
    fc.tuple(ref, pick, fc.constantFrom(0, 0, 1, 3, 100)).map(([r, p, lease]) => new RenewCommand(r, p, lease)),
    fc.tuple(ref, pick, fc.constantFrom(...POINTS), fc.constantFrom(...DATA)).map(([r, p, point, data]) => new CheckpointCommand(r, p, point, data)),
    fc.tuple(ref, pick).map(([r, p]) => new ReleaseCommand(r, p)),
    ref.map((r) => new GetCommand(r)),
    ref.map((r) => new InspectCommand(r)),
    fc.constant(null).map(() => new ListAbandonedCommand()),
    fc.constantFrom(1, 2, 1000).map((limit) => new ReapCommand(limit)),
    jump,
    jump,
  ];
}
