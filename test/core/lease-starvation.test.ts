/**
 * Issue 26 item 11, the core part: a renewal that waits for the store (queued behind a pool the
 * handlers' own transactions hold) is told in a warning naming the lease, the wait and the fixes,
 * rate-limited like the logger's other repeated lines; and no new renewal is sent for an execution
 * while its previous one still waits, so starved renewals do not pile up in the store's queue.
 *
 * The memory store behind a wrapper whose renew is held until the test lets it go; fake timers
 * move the keeper's ticks and Date.now together: no wall-clock thresholds.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { withIdempotency } from '../../src/http/web.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { latch, recordingLogger } from '../support/recording.js';

/** The memory store, its renew counted and replaced by `renew` (which gets the real one). */
function wrapped(renew: (real: IdempotencyStore['renew'], ...args: Parameters<IdempotencyStore['renew']>) => Promise<boolean>) {
  const store = memoryStore({ sweepIntervalMs: 0 });
  let calls = 0;
  const real: IdempotencyStore['renew'] = (ref, token, leaseMs) => store.renew(ref, token, leaseMs);
  const proxy = new Proxy(store, {
    get(target, name, receiver) {
      if (name === 'renew') {
        return (...args: Parameters<IdempotencyStore['renew']>) => {
          calls++;
          return renew(real, ...args);
        };
      }
      return Reflect.get(target, name, receiver) as unknown;
    },
  });
  return { store: proxy, calls: () => calls };
}

const post = (key: string) =>
  new Request('http://local/charges', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{}' });

function gatedHandler() {
  const gate = latch();
  const started = latch();
  const handler = async () => {
    started.open();
    await gate.promise;
    return Response.json({ ok: true }, { status: 201 });
  };
  return { handler, running: started.promise, open: gate.open };
}

describe('lease renewal starved by the store', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('warns once a renewal is still waiting at the next tick, naming the lease and the fixes, and sends no more while it waits', async () => {
    vi.useFakeTimers();
    let held = latch();
    const { store, calls } = wrapped(async (real, ...args) => {
      const ok = await real(...args);
      await held.promise;
      return ok;
    });
    const { lines, logger } = recordingLogger();
    const gated = gatedHandler();
    const handle = withIdempotency(gated.handler, { store, leaseMs: 300, logger });
    const answer = handle(post('order-1'));
    await gated.running;
    await vi.advanceTimersByTimeAsync(100);
    expect(calls()).toBe(1);
    expect(lines).toEqual([]);
    // The next tick finds that renewal still waiting: a warning, and no second renewal.
    await vi.advanceTimersByTimeAsync(100);
    expect(calls()).toBe(1);
    expect(lines).toHaveLength(1);
    expect(lines[0]!.level).toBe('warn');
    const line = lines[0]!.message;
    expect(line).toContain('idemkit: lease renewal starved');
    expect(line).toContain('key "order-1"');
    expect(line).toContain('has waited 100 ms for the store and is still waiting');
    expect(line).toContain('(100 ms, a third of leaseMs)');
    expect(line).toContain("queued behind the store's connections");
    expect(line).toContain('`leasePool`');
    expect(line).toContain('size the pool above the number of concurrent requests');
    // Many more ticks: still the one renewal in flight, and the warning is not repeated within the minute.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls()).toBe(1);
    expect(lines).toHaveLength(1);
    // Once it answers, renewals go on, one per tick.
    held.open();
    await vi.advanceTimersByTimeAsync(100);
    expect(calls()).toBe(2);
    await vi.advanceTimersByTimeAsync(100);
    expect(calls()).toBe(3);
    // A minute later the next starved renewal is logged again, counting those left out meanwhile
    // (ten ticks that found it waiting, and its answer 1,100 ms after it was sent).
    await vi.advanceTimersByTimeAsync(60_000);
    expect(lines).toHaveLength(1);
    held = latch();
    await vi.advanceTimersByTimeAsync(200);
    expect(lines).toHaveLength(2);
    expect(lines[1]!.message).toContain('has waited 100 ms for the store and is still waiting');
    expect(lines[1]!.message).toMatch(/ \(11 more like it since the last report\)$/);
    held.open();
    gated.open();
    expect((await answer).status).toBe(201);
  });

  it('warns when a renewal answered only after more than a renewal period, and names a redacted key by its hash', async () => {
    vi.useFakeTimers();
    // The round trip takes 150 ms of the clock but no tick passes meanwhile.
    const { store, calls } = wrapped(async (real, ...args) => {
      vi.setSystemTime(Date.now() + 150);
      return real(...args);
    });
    const { lines, logger } = recordingLogger();
    const gated = gatedHandler();
    const handle = withIdempotency(gated.handler, { store, leaseMs: 300, logger, redactKeys: true });
    const answer = handle(post('order-2'));
    await gated.running;
    await vi.advanceTimersByTimeAsync(100);
    expect(calls()).toBe(1);
    expect(lines).toHaveLength(1);
    expect(lines[0]!.message).toMatch(/the renewal of the lease on key sha256:[0-9a-f]{32} took 150 ms, longer than the renewal period \(100 ms/);
    expect(lines[0]!.message).not.toContain('order-2');
    gated.open();
    expect((await answer).status).toBe(201);
  });

  it('says nothing while renewals answer within the period', async () => {
    vi.useFakeTimers();
    const { store, calls } = wrapped((real, ...args) => real(...args));
    const { lines, logger } = recordingLogger();
    const gated = gatedHandler();
    const handle = withIdempotency(gated.handler, { store, leaseMs: 300, logger });
    const answer = handle(post('order-3'));
    await gated.running;
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls()).toBe(10);
    gated.open();
    expect((await answer).status).toBe(201);
    expect(lines).toEqual([]);
  });
});
