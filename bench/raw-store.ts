/**
 * The raw store time per request, in-process and without HTTP: `claim` + `complete` of a new key,
 * and one replay read (`claim` on a completed key). Also the fingerprint of the bench body, the
 * other per-request cost the middleware cannot avoid.
 */
import { randomUUID } from 'node:crypto';
import type { IdempotencyStore } from 'idemkit';
import { fingerprint } from 'idemkit/kit';
import type { StoredResponse } from 'idemkit/kit';
import type { StoreKind } from './shared.js';
import { openBenchStore } from './stores.js';
import { BODY, CONTENT_TYPE, REPLAY_KEYS, ROUTE, median } from './shared.js';

export interface RawStoreResult {
  readonly store: Exclude<StoreKind, 'none'>;
  /** Mean µs of `claim` + `complete` for a new key (median over the repetitions). */
  readonly newKeyMicros: number;
  /** Mean µs of one `claim` on a completed key. */
  readonly replayMicros: number;
  readonly newKeyRepetitions: readonly number[];
  readonly replayRepetitions: readonly number[];
  /** Server round trips per request: claim + complete of a new key, and a replay (0: in-process). */
  readonly newKeyRoundTrips: number;
  readonly replayRoundTrips: number;
}

export interface RawResults {
  readonly iterations: number;
  readonly repetitions: number;
  readonly stores: readonly RawStoreResult[];
  /** Mean µs of `fingerprint()` over the bench request (canonical JSON + SHA-256). */
  readonly fingerprintMicros: number;
}

const CLAIM = { leaseMs: 30_000, windowMs: 86_400_000 };
const FACTS = { method: 'POST', path: ROUTE, contentType: CONTENT_TYPE, body: Buffer.from(BODY) };
const FP = fingerprint(FACTS);
/** What the middleware stores for the bench handler's answer. */
const RESPONSE: StoredResponse = {
  status: 201,
  headers: [['content-type', 'application/json; charset=utf-8']],
  body: Buffer.from(JSON.stringify({ id: randomUUID(), ok: true })),
  bodyOmitted: false,
};

let keyCounter = 0;

async function newKeys(store: IdempotencyStore, n: number): Promise<number> {
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const ref = { scope: '', key: `raw-${keyCounter++}` };
    const claim = await store.claim(ref, FP, CLAIM);
    if (claim.kind !== 'acquired') throw new Error(`raw bench: expected a new claim, got ${claim.kind}`);
    await store.complete(ref, claim.token, RESPONSE);
  }
  return Number(process.hrtime.bigint() - start) / 1e3 / n;
}

async function replays(store: IdempotencyStore, refs: ReadonlyArray<{ scope: string; key: string }>, n: number): Promise<number> {
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const claim = await store.claim(refs[i % refs.length]!, FP, CLAIM);
    if (claim.kind !== 'completed') throw new Error(`raw bench: expected a replay, got ${claim.kind}`);
  }
  return Number(process.hrtime.bigint() - start) / 1e3 / n;
}

async function measureStore(kind: Exclude<StoreKind, 'none'>, iterations: number, repetitions: number): Promise<RawStoreResult> {
  const opened = await openBenchStore(kind, { countRoundTrips: true });
  const { store } = opened;
  // Over the network a round trip dominates; fewer iterations give the same precision.
  if (kind === 'postgres' || kind === 'redis' || kind === 'redis-node') iterations = Math.max(500, Math.round(iterations / 10));
  try {
    const refs = Array.from({ length: REPLAY_KEYS }, (_, i) => ({ scope: '', key: `raw-replay-${i}` }));
    for (const ref of refs) {
      const claim = await store.claim(ref, FP, CLAIM);
      if (claim.kind === 'acquired') await store.complete(ref, claim.token, RESPONSE);
    }
    const warm = Math.max(1_000, iterations >> 2);
    await newKeys(store, warm);
    await replays(store, refs, warm);
    const newKeyRepetitions: number[] = [];
    const replayRepetitions: number[] = [];
    for (let r = 0; r < repetitions; r++) {
      newKeyRepetitions.push(await newKeys(store, iterations));
      replayRepetitions.push(await replays(store, refs, iterations));
    }
    const before = opened.roundTrips();
    await newKeys(store, 1);
    const newKeyRoundTrips = opened.roundTrips() - before;
    await replays(store, refs, 1);
    const replayRoundTrips = opened.roundTrips() - before - newKeyRoundTrips;
    return {
      store: kind,
      newKeyRoundTrips,
      replayRoundTrips,
      newKeyMicros: median(newKeyRepetitions),
      replayMicros: median(replayRepetitions),
      newKeyRepetitions,
      replayRepetitions,
    };
  } finally {
    await opened.close();
  }
}

function measureFingerprint(iterations: number): number {
  for (let i = 0; i < 1_000; i++) fingerprint(FACTS);
  const start = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) fingerprint(FACTS);
  return Number(process.hrtime.bigint() - start) / 1e3 / iterations;
}

export async function measureRawStores(kinds: ReadonlyArray<Exclude<StoreKind, 'none'>>, iterations: number, repetitions: number): Promise<RawResults> {
  const stores: RawStoreResult[] = [];
  for (const kind of kinds) stores.push(await measureStore(kind, iterations, repetitions));
  return { iterations, repetitions, stores, fingerprintMicros: measureFingerprint(iterations) };
}
