/**
 * What every section of the store contract shares: the test framework passed in, the context the
 * caller's `setup` makes, the leases and windows the cases claim with, and the helpers that name a
 * record, claim it and build a response.
 */
import { randomUUID } from 'node:crypto';
import type { Claim, ClaimOptions, IdempotencyStore, RecordRef, StoredResponse } from '../../core/store.js';

/** The matchers the contract uses: a subset of vitest's and Jest's `expect(...)`. */
export interface ContractMatchers {
  toBe(expected: unknown): void;
  toEqual(expected: unknown): void;
  toMatchObject(expected: object): void;
  toMatch(expected: RegExp | string): void;
  toHaveLength(length: number): void;
  toBeGreaterThan(n: number): void;
  toBeGreaterThanOrEqual(n: number): void;
  toBeLessThanOrEqual(n: number): void;
  toBeUndefined(): void;
  toBeNull(): void;
  toBeInstanceOf(type: abstract new (...args: never[]) => unknown): void;
}

export interface ContractAssertion extends ContractMatchers {
  readonly not: ContractMatchers;
  readonly rejects: { toBeInstanceOf(type: abstract new (...args: never[]) => unknown): Promise<void> };
}

/**
 * What a case may receive from the runner: vitest's context can skip at run time; others may pass
 * nothing, and then a case that would skip passes. A case reads it through rest parameters
 * (`async (...context: [ContractTestContext?])`) so that its function's length stays 0: Jest takes
 * a declared parameter for a `done` callback.
 */
export interface ContractTestContext {
  skip?(): void;
}

/**
 * The test framework, passed in: `{ describe, it, expect, beforeAll, afterAll }` from vitest (or
 * Jest's globals). Typed by what the contract calls, so any runner of that shape fits.
 */
export interface ContractTestApi {
  describe(name: string, body: () => void): void;
  it(name: string, body: (context: ContractTestContext) => Promise<void>): void;
  expect(actual: unknown): ContractAssertion;
  beforeAll(fn: () => Promise<void>): void;
  afterAll(fn: () => Promise<void>): void;
}

export interface ContractContext {
  readonly store: IdempotencyStore;
  /**
   * Moves the store's clock forward by `ms`: an injected clock where the store has one, otherwise
   * real time passing (with short leases, so the suite stays fast).
   */
  advance(ms: number): Promise<void>;
  close?(): Promise<void> | void;
}

/**
 * What a section receives. Its cases are registered before the store exists (the caller's `setup`
 * runs in the suite's `beforeAll`), so `store`, `advance` and `acquire` are for the cases' bodies:
 * they answer once setup has run.
 */
export interface ContractSuite {
  readonly test: ContractTestApi;
  /** The store under test. */
  readonly store: IdempotencyStore;
  /** `ContractContext.advance`: moves the store's clock forward by `ms`. */
  advance(ms: number): Promise<void>;
  /** Claims `r`, failing the case unless it is acquired. */
  acquire(r: RecordRef, fp?: string, o?: ClaimOptions): Promise<Extract<Claim, { kind: 'acquired' }>>;
  /**
   * Registers a case of an optional capability (`hasAdmin`, `canListAbandoned`, …): `body` gets the
   * store as one that has it, and a store without it skips the case.
   */
  itWith<S extends IdempotencyStore>(has: (store: IdempotencyStore) => store is S, name: string, body: (store: S) => Promise<void>): void;
}

/**
 * Stores on real time (Redis, PostgreSQL, MySQL) see time pass between any two calls, and on a
 * loaded machine that can be long. So no case asserts that *less* than some time has passed: what
 * must stay live gets a lease and a window far longer than any test (LIVE), and only what must
 * end gets a short one, followed by `advance` (which can only ever wait longer, never shorter) or
 * by `renew(…, 0)`.
 */
export const LEASE = 200;
export const WINDOW = 600;
/** A lease and a window that end within the test, after `advance`. */
export const opts = { leaseMs: LEASE, windowMs: WINDOW };
/** Nothing ends during a test. */
export const LIVE = { leaseMs: 60_000, windowMs: 120_000 };
/** The lease ends after `advance(LEASE + 50)`; the window stays open. */
export const SHORT_LEASE = { leaseMs: LEASE, windowMs: 120_000 };

export const response = (body: string | Uint8Array, status = 201): StoredResponse => ({
  status,
  headers: [
    ['content-type', 'application/json'],
    ['location', '/charges/1'],
  ],
  body: typeof body === 'string' ? new TextEncoder().encode(body) : body,
  bodyOmitted: false,
});

/** A record no other case touches: a fresh key, in a fresh scope unless one is given. */
export const ref = (scope = `scope-${randomUUID()}`): RecordRef => ({ scope, key: `key-${randomUUID()}` });

/** A suite whose store and clock are the context `current()` answers, once setup has made it. */
export function contractSuite(test: ContractTestApi, current: () => ContractContext): ContractSuite {
  return {
    test,
    get store() {
      return current().store;
    },
    advance: (ms) => current().advance(ms),
    async acquire(r, fp = 'fp-1', o = LIVE) {
      const claim = await current().store.claim(r, fp, o);
      if (claim.kind !== 'acquired') throw new Error(`expected acquired, got ${claim.kind}`);
      return claim;
    },
    itWith(has, name, body) {
      test.it(name, async (...context: [ContractTestContext?]) => {
        const store = current().store;
        if (!has(store)) return context[0]?.skip?.();
        return body(store);
      });
    },
  };
}
