/**
 * The client's waits leave nothing behind on the caller's AbortSignal: a signal shared by many
 * calls (one per page, one per job) would otherwise collect an abort listener per retry, and
 * Node warns past 10. Also: a wait on a signal that is already aborted ends at once. (The
 * test:mutation survivors in backoff.ts's sleep and raceAbort.)
 */
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { raceAbort, sleep } from '../../src/client/backoff.js';

const listeners = (signal: AbortSignal) => getEventListeners(signal, 'abort').length;
/** Whether `promise` has settled once the microtasks queued now have run. */
async function settledNow(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  for (let i = 0; i < 5; i++) await Promise.resolve();
  return settled;
}

describe('sleep', () => {
  it('removes its abort listener when the time is up', async () => {
    const controller = new AbortController();
    const waiting = sleep(1, controller.signal);
    expect(listeners(controller.signal)).toBe(1);
    await waiting;
    expect(listeners(controller.signal)).toBe(0);
  });

  it('rejects with the reason on abort and leaves no listener', async () => {
    const controller = new AbortController();
    const waiting = sleep(60_000, controller.signal);
    const reason = new Error('stop');
    controller.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    expect(listeners(controller.signal)).toBe(0);
  });

  it('on a signal already aborted: rejects at once with its reason, arming nothing', async () => {
    const reason = new Error('already');
    const signal = AbortSignal.abort(reason);
    const waiting = sleep(60_000, signal);
    expect(await settledNow(waiting)).toBe(true);
    await expect(waiting).rejects.toBe(reason);
    expect(listeners(signal)).toBe(0);
  });
});

describe('raceAbort', () => {
  it('removes its abort listener when the promise resolves or rejects', async () => {
    const controller = new AbortController();
    await expect(raceAbort(Promise.resolve(7), controller.signal)).resolves.toBe(7);
    expect(listeners(controller.signal)).toBe(0);
    const failure = new Error('failed');
    await expect(raceAbort(Promise.reject(failure), controller.signal)).rejects.toBe(failure);
    expect(listeners(controller.signal)).toBe(0);
  });

  it('on abort: rejects with the reason and leaves no listener', async () => {
    const controller = new AbortController();
    const racing = raceAbort(new Promise<never>(() => {}), controller.signal);
    expect(listeners(controller.signal)).toBe(1);
    const reason = new Error('stop');
    controller.abort(reason);
    await expect(racing).rejects.toBe(reason);
    expect(listeners(controller.signal)).toBe(0);
  });
});
