/**
 * A 409 `request-in-progress` says whether the request holding the key is alive: its record
 * changed within 1.5 renewal periods (`owner: 'alive'`, Retry-After the short hint) or not
 * (`'unresponsive'`, Retry-After the lease's end, when a retry can take over); with the lease left
 * and the record's age as members. On the memory store and fake timers: the store's clock is the
 * test's, the lease keeper's renewals run when the test moves time, and no case reads a wall clock.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { recordingEvents } from '../support/recording.js';
import type { Decision, Execution, RequestReader } from '../../src/core/engine.js';
import { IdempotencyEngine } from '../../src/core/engine.js';
import type { KeyInFlightError } from '../../src/core/errors.js';
import type { EngineOptions } from '../../src/core/options.js';
import type { ClaimOptions, IdempotencyStore, RecordRef } from '../../src/core/store.js';
import { memoryStore } from '../../src/stores/memory/index.js';

interface Req {
  readonly key: string;
}

const reader: RequestReader<Req> = {
  method: () => 'POST',
  header: (request) => request.key,
  path: () => '/charges',
  contentType: () => 'application/json',
  readBody: () => ({ body: Buffer.from('{"amount":1}') }),
};

const LEASE_MS = 30_000;
/** 1.5 renewal periods of a 30 s lease (renewed every 10 s). */
const SILENT_MS = 15_000;

function executionOf(decision: Decision<Req>): Execution {
  if (decision.kind !== 'execute') throw new Error(`expected execute, got ${decision.kind}`);
  return decision.execution;
}

function conflictOf(decision: Decision<Req>): KeyInFlightError {
  if (decision.kind !== 'reject' || decision.error.code !== 'ERR_IDEMKIT_KEY_IN_FLIGHT') throw new Error(`expected a 409, got ${decision.kind}`);
  return decision.error as KeyInFlightError;
}

/** The 409 as a client reads it: the Retry-After header and the problem's members. */
function wire(error: KeyInFlightError) {
  const { owner, leaseEndsInMs, renewedMsAgo, retryAfterMs } = error.problem() as Record<string, unknown>;
  return { retryAfter: error.headers['retry-after'], owner, leaseEndsInMs, renewedMsAgo, retryAfterMs };
}

/**
 * A store whose claims are counted (and the tokens they hand out kept), and whose in-flight answers
 * may lose their age (a store that cannot tell it).
 */
function counting(store: IdempotencyStore, withoutAge = false) {
  let claims = 0;
  const tokens: string[] = [];
  const wrapped: IdempotencyStore = {
    ...store,
    name: store.name,
    maxResponseBytes: store.maxResponseBytes,
    claim: async (r: RecordRef, fp: string, options: ClaimOptions) => {
      claims++;
      const claim = await store.claim(r, fp, options);
      if (claim.kind === 'acquired') tokens.push(claim.token);
      return withoutAge && claim.kind === 'in_flight' ? { kind: 'in_flight', retryAfterMs: claim.retryAfterMs } : claim;
    },
    renew: store.renew.bind(store),
    checkpoint: store.checkpoint.bind(store),
    complete: store.complete.bind(store),
    release: store.release.bind(store),
    get: store.get.bind(store),
  };
  return { store: wrapped, claims: () => claims, tokens };
}

/**
 * Two instances on one store, with the same lease: the owner's (whose handler holds the key, and
 * renews it unless `ownerRenews` is false: it froze, or its process is gone) and the one a retry reaches.
 */
function instances(options: Partial<EngineOptions<Req>> = {}, { ownerRenews = true, withoutAge = false } = {}) {
  const memory = memoryStore({ sweepIntervalMs: 0 });
  const { store, claims, tokens } = counting(memory, withoutAge);
  const owner = new IdempotencyEngine<Req>({ store, leaseMs: LEASE_MS, renewLease: ownerRenews });
  const retry = new IdempotencyEngine<Req>({ store, leaseMs: LEASE_MS, ...options });
  return { store, memory, claims, tokens, owner, retry };
}

beforeEach(() => {
  vi.useFakeTimers({ now: Date.UTC(2026, 0, 1) });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('a 409 says whether the request holding the key is alive', () => {
  it('a live owner (renewing every 10 s): alive, Retry-After the 1 s hint, the lease left and the age since its last renewal', async () => {
    const { owner, retry, memory } = instances();
    const held = executionOf(await owner.decide({ key: 'k' }, reader));
    // 25 s into the handler: renewed at 10 s and 20 s, so its record changed 5 s ago.
    await vi.advanceTimersByTimeAsync(25_000);
    expect(wire(conflictOf(await retry.decide({ key: 'k' }, reader)))).toEqual({
      retryAfter: '1',
      owner: 'alive',
      leaseEndsInMs: 25_000,
      renewedMsAgo: 5_000,
      retryAfterMs: 1_000,
    });
    // However long it runs: 10 minutes on, still alive and still the short hint.
    await vi.advanceTimersByTimeAsync(600_000);
    expect(wire(conflictOf(await retry.decide({ key: 'k' }, reader)))).toMatchObject({ retryAfter: '1', owner: 'alive', retryAfterMs: 1_000 });
    await held.finish(201, {}, Buffer.from('{}'));
    memory.close();
  });

  it('an owner that stopped renewing for more than 1.5 periods: unresponsive, Retry-After the end of its lease', async () => {
    const { owner, retry, memory } = instances({}, { ownerRenews: false });
    executionOf(await owner.decide({ key: 'k' }, reader));
    // At 1.5 periods exactly it is still alive (one late renewal is not enough to give up on it).
    await vi.advanceTimersByTimeAsync(SILENT_MS);
    expect(wire(conflictOf(await retry.decide({ key: 'k' }, reader)))).toEqual({
      retryAfter: '1',
      owner: 'alive',
      leaseEndsInMs: 15_000,
      renewedMsAgo: 15_000,
      retryAfterMs: 1_000,
    });
    await vi.advanceTimersByTimeAsync(1);
    const silent = conflictOf(await retry.decide({ key: 'k' }, reader));
    expect(wire(silent)).toEqual({ retryAfter: '15', owner: 'unresponsive', leaseEndsInMs: 14_999, renewedMsAgo: 15_001, retryAfterMs: 14_999 });
    expect(silent.problem().detail).toMatch(/stopped renewing/);
    // Rounded up to whole seconds: 12.5 s left is 13.
    await vi.advanceTimersByTimeAsync(2_499);
    expect(wire(conflictOf(await retry.decide({ key: 'k' }, reader)))).toMatchObject({ retryAfter: '13', leaseEndsInMs: 12_500, retryAfterMs: 12_500 });
    // Never 0: a few ms before the lease ends, 1.
    await vi.advanceTimersByTimeAsync(12_495);
    expect(wire(conflictOf(await retry.decide({ key: 'k' }, reader)))).toMatchObject({ retryAfter: '1', owner: 'unresponsive', retryAfterMs: 5 });
    // Once the lease has ended, the retry Retry-After pointed at takes the key over.
    await vi.advanceTimersByTimeAsync(5);
    expect(executionOf(await retry.decide({ key: 'k' }, reader)).context.takeover).toBe(true);
    memory.close();
  });

  it('the members agree with each other and with the header, alive or not', async () => {
    const { owner, retry, memory } = instances({ retryAfterMs: 2_500 }, { ownerRenews: false });
    executionOf(await owner.decide({ key: 'k' }, reader));
    for (const step of [0, 3_000, 6_000, 7_000, 1, 4_000, 9_998]) {
      await vi.advanceTimersByTimeAsync(step);
      const error = conflictOf(await retry.decide({ key: 'k' }, reader));
      const { retryAfter, owner: said, leaseEndsInMs, renewedMsAgo, retryAfterMs } = wire(error);
      // The record was claimed at 0 and never renewed: age and lease left add up to the lease.
      expect((leaseEndsInMs as number) + (renewedMsAgo as number)).toBe(LEASE_MS);
      expect(said).toBe((renewedMsAgo as number) > SILENT_MS ? 'unresponsive' : 'alive');
      expect(retryAfterMs).toBe(said === 'alive' ? Math.min(2_500, leaseEndsInMs as number) : leaseEndsInMs);
      expect(Number(retryAfter)).toBe(Math.max(1, Math.ceil((retryAfterMs as number) / 1000)));
      // The error's fields are the members, unrounded.
      expect([error.owner, error.leaseEndsInMs, error.renewedMsAgo, error.retryAfterMs]).toEqual([said, leaseEndsInMs, renewedMsAgo, retryAfterMs]);
    }
    memory.close();
  });

  it('tells the `conflict` event the owner too', async () => {
    const { events, named } = recordingEvents();
    const { owner, retry, memory } = instances({ events }, { ownerRenews: false });
    executionOf(await owner.decide({ key: 'k' }, reader));
    await retry.decide({ key: 'k' }, reader);
    await vi.advanceTimersByTimeAsync(20_000);
    await retry.decide({ key: 'k' }, reader);
    expect(named('conflict')).toMatchObject([
      { key: 'k', status: 409, retryAfterMs: 1_000, owner: 'alive' },
      { key: 'k', status: 409, retryAfterMs: 10_000, owner: 'unresponsive' },
    ]);
    memory.close();
  });

  it('takes the owner for alive when the store cannot tell the age (a record an earlier idemkit wrote), and leaves renewedMsAgo out', async () => {
    const { owner, retry, memory } = instances({}, { ownerRenews: false, withoutAge: true });
    executionOf(await owner.decide({ key: 'k' }, reader));
    await vi.advanceTimersByTimeAsync(20_000);
    const error = conflictOf(await retry.decide({ key: 'k' }, reader));
    expect(wire(error)).toEqual({ retryAfter: '1', owner: 'alive', leaseEndsInMs: 10_000, renewedMsAgo: undefined, retryAfterMs: 1_000 });
    expect('renewedMsAgo' in error.problem()).toBe(false);
    memory.close();
  });

  it('judges no owner by silence where this engine renews no lease (`renewLease: false`): alive, as before', async () => {
    const { owner, retry, memory } = instances({ renewLease: false }, { ownerRenews: false });
    executionOf(await owner.decide({ key: 'k' }, reader));
    await vi.advanceTimersByTimeAsync(20_000);
    expect(wire(conflictOf(await retry.decide({ key: 'k' }, reader)))).toMatchObject({ retryAfter: '1', owner: 'alive', renewedMsAgo: 20_000 });
    memory.close();
  });

  it("follows the engine's own lease: 1.5 periods of a 3 s lease is 1.5 s", async () => {
    const memory = memoryStore({ sweepIntervalMs: 0 });
    const owner = new IdempotencyEngine<Req>({ store: memory, leaseMs: 3_000, renewLease: false });
    const retry = new IdempotencyEngine<Req>({ store: memory, leaseMs: 3_000 });
    executionOf(await owner.decide({ key: 'k' }, reader));
    await vi.advanceTimersByTimeAsync(1_500);
    expect(conflictOf(await retry.decide({ key: 'k' }, reader)).owner).toBe('alive');
    await vi.advanceTimersByTimeAsync(1);
    expect(wire(conflictOf(await retry.decide({ key: 'k' }, reader)))).toMatchObject({ retryAfter: '2', owner: 'unresponsive', retryAfterMs: 1_499 });
    memory.close();
  });
});

describe("inFlight: 'wait' and an owner that stopped renewing", () => {
  it('sleeps until its lease ends and takes the key over, without polling it meanwhile', async () => {
    const { owner, retry, claims, memory } = instances({ inFlight: 'wait', waitTimeoutMs: 20_000 }, { ownerRenews: false });
    executionOf(await owner.decide({ key: 'k' }, reader));
    await vi.advanceTimersByTimeAsync(16_000);
    let settled = false;
    const waiting = retry.decide({ key: 'k' }, reader).finally(() => (settled = true));
    await vi.advanceTimersByTimeAsync(13_999);
    // The owner and the waiter's one look at the record; nothing until the lease ends at 30 s.
    expect([claims(), settled]).toEqual([2, false]);
    await vi.advanceTimersByTimeAsync(1);
    expect(executionOf(await waiting).context.takeover).toBe(true);
    expect(claims()).toBe(3);
    memory.close();
  });

  it('whose lease outlasts the wait: answers 409 at waitTimeoutMs, with Retry-After the lease left', async () => {
    const { owner, retry, claims, memory } = instances({ inFlight: 'wait', waitTimeoutMs: 5_000 }, { ownerRenews: false });
    executionOf(await owner.decide({ key: 'k' }, reader));
    await vi.advanceTimersByTimeAsync(16_000);
    const waiting = retry.decide({ key: 'k' }, reader);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(wire(conflictOf(await waiting))).toEqual({ retryAfter: '9', owner: 'unresponsive', leaseEndsInMs: 9_000, renewedMsAgo: 21_000, retryAfterMs: 9_000 });
    expect(claims()).toBe(3);
    memory.close();
  });

  it('that comes back (renews) while a waiter sleeps: the waiter finds it alive and polls again, then replays its answer', async () => {
    const { owner, retry, memory, tokens } = instances({ inFlight: 'wait', waitTimeoutMs: 60_000 }, { ownerRenews: false });
    const held = executionOf(await owner.decide({ key: 'k' }, reader));
    await vi.advanceTimersByTimeAsync(16_000);
    const waiting = retry.decide({ key: 'k' }, reader);
    await vi.advanceTimersByTimeAsync(10_000);
    // The owner renews by hand (its process thawed), then finishes 2 s later.
    expect(await memory.renew({ scope: '', key: 'k' }, tokens[0]!, LEASE_MS)).toBe(true);
    await vi.advanceTimersByTimeAsync(4_000);
    await vi.advanceTimersByTimeAsync(2_000);
    await held.finish(201, {}, Buffer.from('{"paid":true}'));
    await vi.advanceTimersByTimeAsync(250);
    const decision = await waiting;
    expect(decision.kind === 'replay' && Buffer.from(decision.response.body!).toString()).toBe('{"paid":true}');
    memory.close();
  });

  it('a live owner is still polled (10 ms, doubling to 250 ms), and its answer replayed', async () => {
    const { owner, retry, claims, memory } = instances({ inFlight: 'wait', waitTimeoutMs: 20_000 });
    const held = executionOf(await owner.decide({ key: 'k' }, reader));
    await vi.advanceTimersByTimeAsync(16_000);
    const waiting = retry.decide({ key: 'k' }, reader);
    await vi.advanceTimersByTimeAsync(1_000);
    // Looks at 0, 10, 30, 70, 150, 310, 560, 810 ms: 8, plus the owner's claim.
    expect(claims()).toBe(9);
    await held.finish(201, {}, Buffer.from('{"paid":true}'));
    await vi.advanceTimersByTimeAsync(250);
    const decision = await waiting;
    expect(decision.kind).toBe('replay');
    memory.close();
  });
});
