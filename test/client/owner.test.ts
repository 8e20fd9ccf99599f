/**
 * idemkit's in-progress 409 says whether the original request's owner is alive (members `owner`,
 * `leaseEndsInMs`, `renewedMsAgo`, `retryAfterMs`). A live owner is polled within `maxRetryTime`;
 * an unresponsive one (its instance died: it stopped renewing its lease) is waited out in one pause
 * to its lease's end, after which the retry takes the key over and gets the real answer; one whose
 * lease ends after the deadline settles the call as "in progress", never as a failure, saying when
 * a retry can take over. Without `owner` the client polls as it always has. None of it spends
 * `retries` or the retry budget. On fake timers, so every time below is exact.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HttpStatusError, createIdempotentFetch, createRetryBudget } from '../../src/client/index.js';
import type { RetryContext } from '../../src/client/index.js';
import { TAKEOVER_MARGIN_MS } from '../../src/client/fetch.js';
import type { Action } from './servers.js';
import { scriptedFetch } from './servers.js';

beforeEach(() => void vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] }));
afterEach(() => void vi.useRealTimers());

type Answer = Exclude<Action, string>;
const post = { method: 'POST', body: '{"amount":1200}' };

/** idemkit's 409 `request-in-progress` with these members; `Retry-After` in whole seconds. */
function inProgress(members: Record<string, unknown>, retryAfter = '1'): Answer {
  const problem = { type: 'urn:idemkit:problem:request-in-progress', title: 'A request with this Idempotency-Key is in progress', status: 409 };
  return { status: 409, headers: { 'content-type': 'application/problem+json', 'retry-after': retryAfter }, body: JSON.stringify(Object.assign(problem, members)) };
}
/** A live owner: it renewed a moment ago; the short hint in both forms. */
const alive = inProgress({ owner: 'alive', leaseEndsInMs: 29_000, renewedMsAgo: 1_000, retryAfterMs: 1_000 });
/** An owner that stopped renewing; `Retry-After` is then the lease left, as idemkit sends it. */
function unresponsive(leaseEndsInMs: number): Answer {
  return inProgress({ owner: 'unresponsive', leaseEndsInMs, renewedMsAgo: 30_000 - leaseEndsInMs, retryAfterMs: 1_000 }, String(Math.ceil(leaseEndsInMs / 1000)));
}
/** The answer of the retry that took the key over and ran the request. */
const created: Answer = { status: 201, body: '{"charge":1}' };
const replay: Answer = { status: 201, headers: { 'idempotent-replayed': 'true' }, body: '{"charge":1}' };

/** Runs the call's pauses on the fake clock; the call's result, or what it threw. */
async function settled<T>(call: Promise<T>): Promise<T | unknown> {
  const result = call.catch((error: unknown) => error);
  await vi.runAllTimersAsync();
  return result;
}

/** When each attempt was sent, from the first. */
const times = (sent: readonly { at: number }[]) => sent.map((s) => s.at - sent[0]!.at);

describe('a live owner is polled, outside `retries` and the retry budget', () => {
  it('four 409s (owner alive, 29 s of lease left) polled after the hint and the backoff, then the replay', async () => {
    const { fetch, sent } = scriptedFetch((n) => (n < 4 ? alive : replay));
    const budget = createRetryBudget({ ratio: 0, capacity: 1, initialTokens: 0 });
    const contexts: RetryContext[] = [];
    const client = createIdempotentFetch({ fetch, retries: 0, retryBudget: budget, randomize: false, onRetry: (c) => void contexts.push(c) });
    const response = (await settled(client('http://api.test/charges', post))) as Response & { idempotency: unknown };

    expect(response.status).toBe(201);
    expect(response.idempotency).toEqual({ key: expect.any(String), attempts: 5, replayed: true });
    // The hint (1 s), then max(hint, backoff 500, 1000, 2000): the lease left is not waited out.
    expect(times(sent)).toEqual([0, 1_000, 2_000, 3_000, 5_000]);
    expect(contexts.map((c) => [c.owner, c.status, c.retryAfter, c.retriesLeft])).toEqual(Array.from({ length: 4 }, () => ['alive', 409, 1_000, 0]));
    expect(budget.tokens).toBe(0);
  });

  it('at the deadline the call settles in progress, owner alive, with the hint as the time to come back', async () => {
    const { fetch, sent } = scriptedFetch(() => alive);
    const client = createIdempotentFetch({ fetch, maxRetryTime: 2_500, randomize: false });
    const response = (await settled(client('http://api.test/charges', post))) as Response & { idempotency: unknown };

    expect(times(sent)).toEqual([0, 1_000, 2_000, 2_500]);
    expect(response.status).toBe(409);
    expect(response.idempotency).toMatchObject({ attempts: 4, inProgress: { owner: 'alive', retryInMs: 1_000 } });
  });
});

describe('an unresponsive owner whose lease ends within the deadline is waited out once', () => {
  it('default options: one pause to the lease end (12 s) plus the margin, and the retry takes over: 201, not a replay', async () => {
    const { fetch, sent } = scriptedFetch((n) => (n === 0 ? unresponsive(12_000) : created));
    const contexts: RetryContext[] = [];
    const client = createIdempotentFetch({ fetch, onRetry: (c) => void contexts.push(c) });
    const response = (await settled(client('http://api.test/charges', post))) as Response & { idempotency: { inProgress?: unknown } };

    expect(TAKEOVER_MARGIN_MS).toBe(250);
    expect(times(sent)).toEqual([0, 12_250]);
    expect(contexts).toMatchObject([{ status: 409, owner: 'unresponsive', delay: 12_250, retriesLeft: 3 }]);
    expect(response.status).toBe(201);
    expect(response.idempotency).toMatchObject({ attempts: 2, replayed: false });
    expect(response.idempotency.inProgress).toBeUndefined();
    // Both attempts carried the one key.
    expect(new Set(sent.map((s) => s.headers.get('idempotency-key'))).size).toBe(1);
  });

  it('default options, the default 30 s lease: an owner that dies after the first poll is waited for, never reported failed', async () => {
    // Alive at first; the next answer finds it stopped renewing with 27.5 s of its lease left.
    const { fetch, sent } = scriptedFetch((n) => [alive, unresponsive(27_500)][n] ?? created);
    const response = (await settled(createIdempotentFetch({ fetch })('http://api.test/charges', post))) as Response;

    expect(times(sent)).toEqual([0, 1_000, 28_750]);
    expect(response.status).toBe(201);
  });

  it('the whole default lease (30 s) at once: within the default deadline (60 s)', async () => {
    const { fetch, sent } = scriptedFetch((n) => (n === 0 ? unresponsive(30_000) : created));
    const response = (await settled(createIdempotentFetch({ fetch })('http://api.test/charges', post))) as Response;
    expect(times(sent)).toEqual([0, 30_250]);
    expect(response.status).toBe(201);
  });

  it('a lease that ends just before the deadline: the pause is cut to the deadline, and the retry is sent there', async () => {
    const { fetch, sent } = scriptedFetch((n) => (n === 0 ? unresponsive(9_900) : created));
    const response = (await settled(createIdempotentFetch({ fetch, maxRetryTime: 10_000 })('http://api.test/charges', post))) as Response;
    expect(times(sent)).toEqual([0, 10_000]);
    expect(response.status).toBe(201);
  });

  it('with retries: 0 and an empty retry budget', async () => {
    const { fetch, sent } = scriptedFetch((n) => (n === 0 ? unresponsive(5_000) : created));
    const budget = createRetryBudget({ ratio: 0, capacity: 1, initialTokens: 0 });
    const response = (await settled(createIdempotentFetch({ fetch, retries: 0, retryBudget: budget })('http://api.test/charges', post))) as Response;
    expect(response.status).toBe(201);
    expect(times(sent)).toEqual([0, 5_250]);
    expect(budget.tokens).toBe(0);
  });

  it('a key still held after the wait (a store clock behind): the next waits back off, within maxConflictWait', async () => {
    const { fetch, sent } = scriptedFetch((n) => [unresponsive(5_000), unresponsive(0), unresponsive(0), unresponsive(0)][n] ?? created);
    const client = createIdempotentFetch({ fetch, randomize: false, minTimeout: 500, maxConflictWait: 1_500 });
    const response = (await settled(client('http://api.test/charges', post))) as Response;
    // 5,250; then max(margin, backoff 500, 1,000, 2,000 capped at 1,500).
    expect(times(sent)).toEqual([0, 5_250, 5_750, 6_750, 8_250]);
    expect(response.status).toBe(201);
  });

  it('after the wait the key has a new live owner (another retry took over): polled as any live owner, then its replay', async () => {
    const { fetch, sent } = scriptedFetch((n) => [unresponsive(3_000), alive][n] ?? replay);
    const response = (await settled(createIdempotentFetch({ fetch, randomize: false })('http://api.test/charges', post))) as Response & { idempotency: unknown };
    // The wait is the first 409's; the live owner's poll backs off from there: max(hint 1 s, 500).
    expect(times(sent)).toEqual([0, 3_250, 4_250]);
    expect(response.idempotency).toMatchObject({ attempts: 3, replayed: true });
  });
});

describe('an unresponsive owner whose lease ends after the deadline: settled in progress, with the time to wait', () => {
  it('resolves at once with the 409; response.idempotency.inProgress says unresponsive and when a retry can take over', async () => {
    const { fetch, sent } = scriptedFetch(() => unresponsive(25_000));
    let retries = 0;
    const client = createIdempotentFetch({ fetch, maxRetryTime: 20_000, onRetry: () => void retries++ });
    const response = (await settled(client('http://api.test/charges', post))) as Response & { idempotency: unknown };

    expect(response.status).toBe(409);
    expect(response.idempotency).toMatchObject({ attempts: 1, replayed: false, inProgress: { owner: 'unresponsive', retryInMs: 25_250 } });
    expect([sent.length, retries]).toEqual([1, 0]);
  });

  it('throwOnError: HttpStatusError, inProgress, owner unresponsive, retryInMs; "may or may not have happened", the same key', async () => {
    const { fetch } = scriptedFetch(() => unresponsive(25_000));
    const client = createIdempotentFetch({ fetch, maxRetryTime: 20_000, throwOnError: true });
    const error = await settled(client('http://api.test/charges', { ...post, idempotencyKey: 'order-9' }));

    expect(error).toBeInstanceOf(HttpStatusError);
    expect(error).toMatchObject({ status: 409, inProgress: true, owner: 'unresponsive', retryInMs: 25_250, key: 'order-9', attempts: 1 });
    const { message } = error as HttpStatusError;
    expect(message).toContain('It has not failed');
    expect(message).toContain('may or may not have happened');
    expect(message).toContain('same key (order-9) in 25250 ms');
    expect(message).toContain('never retry with a new one');
  });

  it('after polls of a live owner: settles when the lease left passes the time left', async () => {
    // At 2 s, 18 s are left before the deadline, and the lease ends in 19 s.
    const { fetch, sent } = scriptedFetch((n) => (n < 2 ? alive : unresponsive(19_000)));
    const client = createIdempotentFetch({ fetch, maxRetryTime: 20_000, randomize: false });
    const response = (await settled(client('http://api.test/charges', post))) as Response & { idempotency: unknown };
    expect(times(sent)).toEqual([0, 1_000, 2_000]);
    expect(response.idempotency).toMatchObject({ attempts: 3, inProgress: { owner: 'unresponsive', retryInMs: 19_250 } });
  });

  it('without a deadline (maxRetryTime: Infinity) a lease longer than maxRetryAfter is not waited out: a server cannot hold the call', async () => {
    const { fetch, sent } = scriptedFetch(() => unresponsive(3_600_000));
    const response = (await settled(createIdempotentFetch({ fetch, maxRetryTime: Infinity })('http://api.test/charges', post))) as Response & { idempotency: unknown };
    expect(sent).toHaveLength(1);
    expect(response.idempotency).toMatchObject({ inProgress: { owner: 'unresponsive', retryInMs: 3_600_250 } });
  });
});

describe('without a usable `owner`: polled as before', () => {
  /** The same timeline for each: hint 30 s (the whole lease, as some servers send) capped at 2 s, until the deadline. */
  it.each([
    ['no owner member (another server, an older idemkit)', {}],
    ['an owner value the client does not know', { owner: 'restarting' }],
    ['owner of the wrong type', { owner: true }],
    ['unresponsive, but no lease end in the body or the header', { owner: 'unresponsive' }],
  ])('%s', async (_name, members) => {
    const header = 'owner' in members && members.owner === 'unresponsive' ? 'soon' : '30';
    const { fetch, sent } = scriptedFetch(() => inProgress(members, header));
    const budget = createRetryBudget({ ratio: 0, capacity: 1, initialTokens: 0 });
    const client = createIdempotentFetch({ fetch, maxRetryTime: 7_000, retries: 0, retryBudget: budget, randomize: false });
    const response = (await settled(client('http://api.test/charges', post))) as Response & { idempotency: unknown };

    // With no hint at all (the last case), the polls back off from 500 ms instead.
    expect(times(sent)).toEqual(header === '30' ? [0, 2_000, 4_000, 6_000, 7_000] : [0, 500, 1_500, 3_500, 5_500, 7_000]);
    expect(response.status).toBe(409);
    // What the server said is passed on as it was: an unresponsive owner without a lease end is reported as such.
    const owner = header === '30' ? undefined : 'unresponsive';
    expect(response.idempotency).toMatchObject({ inProgress: { owner, retryInMs: header === '30' ? 30_000 : undefined } });
  });

  it('unresponsive without leaseEndsInMs (or with a malformed one): the Retry-After header is the lease left', async () => {
    for (const members of [{ owner: 'unresponsive' }, { owner: 'unresponsive', leaseEndsInMs: '4000' }, { owner: 'unresponsive', leaseEndsInMs: -1 }]) {
      const { fetch, sent } = scriptedFetch((n) => (n === 0 ? inProgress(members, '12') : created));
      const response = (await settled(createIdempotentFetch({ fetch })('http://api.test/charges', post))) as Response;
      expect([JSON.stringify(members), times(sent), response.status]).toEqual([JSON.stringify(members), [0, 12_250], 201]);
    }
  });

  it('another 409 (not in progress) with an owner member counts against `retries` as before', async () => {
    const other = inProgress({ type: 'about:blank', owner: 'unresponsive', leaseEndsInMs: 100 }, '1');
    const { fetch, sent } = scriptedFetch(() => other);
    const response = (await settled(createIdempotentFetch({ fetch, retries: 2, randomize: false })('http://api.test/charges', post))) as Response & { idempotency: unknown };
    expect(sent).toHaveLength(3);
    expect(response.idempotency).toEqual({ key: expect.any(String), attempts: 3, replayed: false });
  });
});
