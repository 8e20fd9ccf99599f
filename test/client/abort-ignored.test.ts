/**
 * The client's own signal handling, not the fetch's: an injected fetch (or a body stream, or an
 * `onRetry` hook) that never settles and ignores the signal it is given must still be cut short
 * by the caller's abort and by `attemptTimeout`. `raceAbort` is what does it.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { raceAbort } from '../../src/client/backoff.js';
import { AttemptTimeoutError, RequestFailedError, createIdempotentFetch } from '../../src/client/index.js';

afterEach(() => {
  vi.useRealTimers();
});

/** A fetch that records its calls and never answers, whatever its signal says. */
function deafFetch() {
  const calls: RequestInit[] = [];
  const fetch = ((_input: RequestInfo | URL, init?: RequestInit) => {
    calls.push(init ?? {});
    return new Promise<Response>(() => {});
  }) as typeof globalThis.fetch;
  return { fetch, calls };
}

const HOUR = 3_600_000;
const post = { method: 'POST', body: 'x' };

describe('an injected fetch that ignores its signal', () => {
  it("the caller's abort during the attempt still ends the call, with the caller's reason", async () => {
    const { fetch, calls } = deafFetch();
    const controller = new AbortController();
    const reason = new Error('user navigated away');
    const client = createIdempotentFetch({
      attemptTimeout: HOUR,
      retryBudget: false,
      fetch: (input, init) => {
        const pending = fetch(input, init);
        controller.abort(reason); // once the attempt is in the fetch's hands
        return pending;
      },
    });

    await expect(client('http://api.test/charges', { ...post, signal: controller.signal })).rejects.toBe(reason);
    expect(calls).toHaveLength(1);
    // The client did pass a signal on; the fetch just did not listen.
    expect(calls[0]!.signal?.aborted).toBe(true);
  });

  it('attemptTimeout still ends each attempt; the call retries and then fails with AttemptTimeoutError as the cause', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const { fetch, calls } = deafFetch();
    const client = createIdempotentFetch({ fetch, attemptTimeout: 1_000, retries: 2, minTimeout: 10, retryBudget: false });
    const call = client('http://api.test/charges', post).catch((e: unknown) => e);
    await vi.runAllTimersAsync();
    const error = await call;

    expect(error).toBeInstanceOf(RequestFailedError);
    expect(error).toMatchObject({ attempts: 3 });
    expect((error as RequestFailedError).cause).toBeInstanceOf(AttemptTimeoutError);
    expect(calls).toHaveLength(3);
    expect(new Set(calls.map((c) => new Headers(c.headers).get('idempotency-key'))).size).toBe(1);
  });

  it('an abort while an onRetry hook that never settles runs ends the call', async () => {
    const controller = new AbortController();
    const client = createIdempotentFetch({
      retryBudget: false,
      fetch: () => Promise.resolve(new Response(null, { status: 503 })),
      onRetry: () => {
        controller.abort('stop');
        return new Promise<void>(() => {});
      },
    });
    await expect(client('http://api.test/charges', { ...post, signal: controller.signal })).rejects.toBe('stop');
  });

  it('an abort while a body stream that never yields is read ends the call before anything is sent', async () => {
    const { fetch, calls } = deafFetch();
    const controller = new AbortController();
    const body = new ReadableStream<Uint8Array>({
      pull: () => {
        controller.abort('stop');
        return new Promise<void>(() => {});
      },
    });
    const client = createIdempotentFetch({ fetch, retryBudget: false });
    await expect(client('http://api.test/charges', { method: 'POST', body, duplex: 'half', signal: controller.signal } as RequestInit)).rejects.toBe('stop');
    expect(calls).toHaveLength(0);
  });
});

describe('raceAbort', () => {
  const never = new Promise<never>(() => {});

  it('settles with the promise when the signal does not abort', async () => {
    const controller = new AbortController();
    await expect(raceAbort(Promise.resolve(1), controller.signal)).resolves.toBe(1);
    const failure = new Error('failed');
    await expect(raceAbort(Promise.reject(failure), controller.signal)).rejects.toBe(failure);
    await expect(raceAbort(Promise.resolve(2), undefined)).resolves.toBe(2);
  });

  it("rejects with the signal's reason when it aborts first, though the promise never settles", async () => {
    const controller = new AbortController();
    const raced = raceAbort(never, controller.signal);
    controller.abort('late');
    await expect(raced).rejects.toBe('late');
    await expect(raceAbort(never, AbortSignal.abort('already'))).rejects.toBe('already');
  });

  it('an abort after the promise settled changes nothing', async () => {
    const controller = new AbortController();
    const raced = raceAbort(Promise.resolve('done'), controller.signal);
    await expect(raced).resolves.toBe('done');
    controller.abort('after');
    await expect(raced).resolves.toBe('done');
  });
});
