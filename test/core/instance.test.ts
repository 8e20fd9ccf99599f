import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { RequestReader } from '../../src/core/engine.js';
import { IdempotencyEngine } from '../../src/core/engine.js';
import { InstanceInUseError, InvalidOptionError, LeaseLostError } from '../../src/core/errors.js';
import type { Instance } from '../../src/core/instance.js';
import { startInstance } from '../../src/core/instance.js';
import type { IdempotencyStore, RecordRef } from '../../src/core/store.js';
import type { MemoryStore } from '../../src/stores/memory/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';

// Time is the fake timers' (the memory store's clock is Date.now, faked too): a registration's
// lease runs out only when a test moves time, never by how fast the machine is.
const REQUEST_LEASE = { leaseMs: 30_000, windowMs: 86_400_000 };
const quiet = { warn: vi.fn(), error: vi.fn() };

/** A process's view of the store: `kill()` makes every later call hang, as a SIGKILLed process sends nothing. */
function processOn(store: MemoryStore): { readonly store: MemoryStore; kill(): void } {
  let dead = false;
  const view = new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => (dead ? new Promise(() => {}) : (value as (...a: unknown[]) => unknown).apply(target, args));
    },
  });
  return { store: view, kill: () => void (dead = true) };
}

/** A request this instance claims, as the engine claims it: its token starts with the incarnation. */
async function claimAs(store: IdempotencyStore, instance: Instance, ref: RecordRef): Promise<string> {
  const claim = await store.claim(ref, 'fp', { ...REQUEST_LEASE, incarnation: instance.incarnation });
  if (claim.kind !== 'acquired') throw new Error(`expected acquired, got ${claim.kind}`);
  return claim.token;
}

/** `startInstance`, letting fake time run until it settles (it may wait out a registration). */
async function start(store: IdempotencyStore, name: string, leaseMs = 5_000): Promise<Instance> {
  const starting = startInstance({ store, name, leaseMs, logger: quiet });
  starting.catch(() => {});
  await vi.advanceTimersByTimeAsync(3 * leaseMs);
  return starting;
}

describe('instance identity: a restarted instance takes back its crashed predecessor’s work at once', () => {
  let store: MemoryStore;
  beforeEach(() => {
    vi.useFakeTimers({ now: 1_000_000 });
    store = memoryStore({ sweepIntervalMs: 0 });
    quiet.warn.mockClear();
    quiet.error.mockClear();
  });
  afterEach(() => {
    store.close();
    vi.useRealTimers();
  });

  it('claims under an instance carry its incarnation, the first half of every owner token', async () => {
    const instance = await start(store, 'checkout-1');
    expect(instance.incarnation).toMatch(/^[0-9a-f]{16}$/);
    expect(instance.reclaimed).toBe(0);
    const token = await claimAs(store, instance, { scope: 't', key: 'k1' });
    expect(token).toHaveLength(32);
    expect(token.startsWith(instance.incarnation)).toBe(true);
    // Two claims share the incarnation and nothing else.
    const other = await claimAs(store, instance, { scope: 't', key: 'k2' });
    expect(other.slice(16)).not.toBe(token.slice(16));
    await instance.stop();
  });

  it('after a crash, the next incarnation ends the leases of what the dead one held, and a retry takes over at once', async () => {
    const crashed = processOn(store);
    const first = await start(crashed.store, 'checkout-1');
    const charge = { scope: 't', key: 'charge-1' };
    const done = { scope: 't', key: 'charge-2' };
    const lateToken = await claimAs(crashed.store, first, charge);
    await crashed.store.checkpoint(charge, lateToken, 'charged', { chargeId: 'ch_1' });
    await store.complete(done, await claimAs(crashed.store, first, done), { status: 201, headers: [], body: new Uint8Array(), bodyOmitted: false });
    crashed.kill();
    // Within its 30 s lease, the key answers in flight.
    expect((await store.claim(charge, 'fp', REQUEST_LEASE)).kind).toBe('in_flight');

    const second = await start(store, 'checkout-1');
    expect(second.incarnation).not.toBe(first.incarnation);
    expect(second.reclaimed).toBe(1);
    // Well inside the dead request's 30 s lease: the registration's 5 s ran out, nothing more.
    const retry = await store.claim(charge, 'fp', REQUEST_LEASE);
    expect(retry).toMatchObject({ kind: 'acquired', takeover: true, resumeFrom: 'charged', recoveryData: { chargeId: 'ch_1' } });
    // The completed record still replays, and the dead owner is fenced out.
    expect((await store.claim(done, 'fp', REQUEST_LEASE)).kind).toBe('completed');
    await expect(store.complete(charge, lateToken, { status: 201, headers: [], body: null, bodyOmitted: true })).rejects.toBeInstanceOf(LeaseLostError);
    await second.stop();
  });

  it('refuses a second live process with the same name, and ends nothing of the first one', async () => {
    const first = await start(store, 'checkout-1');
    const charge = { scope: 't', key: 'charge-1' };
    const token = await claimAs(store, first, charge);
    const starting = startInstance({ store, name: 'checkout-1', leaseMs: 5_000, logger: quiet });
    const refused = expect(starting).rejects.toBeInstanceOf(InstanceInUseError);
    // The first keeps renewing (its heartbeat runs on the same fake timers) while the second waits
    // twice its registration lease; the request's own 30 s lease is still live after it.
    await vi.advanceTimersByTimeAsync(20_000);
    await refused;
    expect((await store.claim(charge, 'fp', { ...REQUEST_LEASE, leaseMs: 1 })).kind).toBe('in_flight');
    await store.complete(charge, token, { status: 201, headers: [], body: new Uint8Array(), bodyOmitted: false });
    expect(quiet.error).not.toHaveBeenCalled();
    await first.stop();
  });

  it('a clean stop deletes the registration: the next start is at once and cuts nothing short', async () => {
    const first = await start(store, 'checkout-1');
    const charge = { scope: 't', key: 'charge-1' };
    await claimAs(store, first, charge);
    await first.stop();
    // No time passes: the registration is free, and no predecessor is known.
    const second = await startInstance({ store, name: 'checkout-1', leaseMs: 5_000, logger: quiet });
    expect(second.reclaimed).toBe(0);
    expect((await store.claim(charge, 'fp', REQUEST_LEASE)).kind).toBe('in_flight');
    await second.stop();
  });

  it('ends only the dead incarnation’s own claims: not another instance’s, nor one taken over since', async () => {
    const crashed = processOn(store);
    const first = await start(crashed.store, 'checkout-1');
    const neighbour = await start(store, 'checkout-2');
    const mine = { scope: 't', key: 'mine' };
    const theirs = { scope: 't', key: 'theirs' };
    const plain = { scope: 't', key: 'plain' };
    const moved = { scope: 't', key: 'moved' };
    await claimAs(crashed.store, first, mine);
    await claimAs(store, neighbour, theirs);
    expect((await store.claim(plain, 'fp', REQUEST_LEASE)).kind).toBe('acquired');
    // A claim of the first's that another owner took over (its lease given back, then claimed).
    const given = await claimAs(crashed.store, first, moved);
    await store.renew(moved, given, 0);
    const taker = await store.claim(moved, 'fp', REQUEST_LEASE);
    crashed.kill();
    const second = await start(store, 'checkout-1');
    expect(second.reclaimed).toBe(1);
    expect((await store.claim(mine, 'fp', REQUEST_LEASE)).kind).toBe('acquired');
    for (const ref of [theirs, plain, moved]) expect((await store.claim(ref, 'fp', REQUEST_LEASE)).kind).toBe('in_flight');
    expect(taker.kind).toBe('acquired');
    await second.stop();
    await neighbour.stop();
  });

  it('tells, once, when its registration was taken while it could not renew', async () => {
    let paused = false;
    const pausing = new Proxy(store, {
      get(target, property, receiver) {
        const value = Reflect.get(target, property, receiver) as unknown;
        if (property !== 'renew' || typeof value !== 'function') return value;
        return (...args: unknown[]) => (paused ? Promise.reject(new Error('store unreachable')) : (value as (...a: unknown[]) => unknown).apply(target, args));
      },
    });
    const first = await start(pausing, 'checkout-1');
    paused = true;
    const second = await start(store, 'checkout-1');
    paused = false;
    await vi.advanceTimersByTimeAsync(10_000);
    expect(quiet.warn).toHaveBeenCalled();
    expect(quiet.error).toHaveBeenCalledTimes(1);
    expect(String(quiet.error.mock.calls[0]![0])).toContain('"checkout-1" lost its registration');
    await first.stop();
    await second.stop();
  });

  it('an engine given the instance claims under its incarnation; one without it does not', async () => {
    const instance = await start(store, 'checkout-1');
    const reader: RequestReader<{ key: string }> = {
      method: () => 'POST',
      header: (request, name) => (name === 'idempotency-key' ? request.key : undefined),
      path: () => '/charges',
      contentType: () => 'application/json',
      readBody: () => ({ body: Buffer.from('{}') }),
    };
    const withIdentity = new IdempotencyEngine({ store, instance });
    const without = new IdempotencyEngine({ store });
    const mine = await withIdentity.decide({ key: 'mine' }, reader);
    const plain = await without.decide({ key: 'plain' }, reader);
    expect([mine.kind, plain.kind]).toEqual(['execute', 'execute']);
    // Only the engine's own claim carries the incarnation: ending its leases frees that one key.
    expect(await store.endLeasesOf(instance.incarnation)).toBe(1);
    expect((await store.claim({ scope: '', key: 'mine' }, (await store.get({ scope: '', key: 'mine' }))!.fingerprint, REQUEST_LEASE)).kind).toBe('acquired');
    for (const decision of [mine, plain]) if (decision.kind === 'execute') await decision.execution.abort();
    await instance.stop();
  });

  it('refuses what it cannot work with, naming the option', async () => {
    const bare: IdempotencyStore = { ...store, name: 'redis' };
    delete (bare as Partial<MemoryStore>).endLeasesOf;
    await expect(startInstance({ store: bare, name: 'a' })).rejects.toThrow(/`store`.*endLeasesOf/);
    await expect(startInstance({ store, name: '' })).rejects.toThrow(/`name`/);
    await expect(startInstance({ store, name: 'a\nb' })).rejects.toThrow(/`name`/);
    await expect(startInstance({ store, name: 'a', leaseMs: 10 })).rejects.toThrow(/`leaseMs`/);
    await expect(startInstance({ store, name: 'a', lease: 1 } as never)).rejects.toBeInstanceOf(InvalidOptionError);
    const other = memoryStore({ sweepIntervalMs: 0 });
    const there = await startInstance({ store: other, name: 'a', logger: quiet });
    expect(() => new IdempotencyEngine({ store, instance: there })).toThrow(/`instance`.*another store/);
    expect(() => new IdempotencyEngine({ store, instance: { name: 'a', incarnation: '0'.repeat(16) } as never })).toThrow(/`instance`.*startInstance/);
    await there.stop();
    other.close();
  });
});
