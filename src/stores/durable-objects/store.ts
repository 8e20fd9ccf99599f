/**
 * The store a Worker uses: each operation goes, by stub `fetch`, to the Durable Object of the
 * record's shard (object.ts), which decides on its own clock in one transactional step.
 */
import { LeaseLostError, StoreUnavailableError } from '../../core/errors.js';
import { checkInteger, optionReader } from '../../core/option-reader.js';
import type { AbandonedRecords, Claim, IdempotencyRecord, IdempotencyStore, IncarnationLeases, RecordRef } from '../../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, fitResponse } from '../../core/store.js';
import { checkIncarnation } from '../../core/token.js';
import { checkRecordRef } from '../../core/validate.js';
import type { Operation, WireClaim, WireFenced, WireRecord } from './wire.js';
import { fromWireRecord, fromWireResponse, toWireResponse } from './wire.js';

/** A Durable Object stub, as far as the store uses it. */
interface DurableObjectStubLike {
  fetch(input: string, init?: RequestInit): Promise<Response>;
}

export interface DurableObjectStoreOptions {
  /**
   * The binding of the `IdempotencyObject` class (`env.IDEMPOTENCY`): a `DurableObjectNamespace`.
   */
  readonly namespace: {
    idFromName(name: string): unknown;
    get(id: never): DurableObjectStubLike;
  };
  /**
   * How many objects share the records: a record lives in the object its (scope, key) hashes to.
   * One object serves one request at a time, so more shards carry more load; `reap`, `listAbandoned`
   * and `endLeasesOf` ask every shard. Fixed for the life of the namespace: changing it sends keys
   * to objects that do not have their records, so their retries would run again.
   * @default 32
   */
  readonly shards?: number;
  /**
   * How long after its end (window over, no live lease) the object's alarm deletes a record by
   * itself, as Redis's `graceMs`: claims treat an ended record as absent at once, and `reap`
   * deletes it sooner, so `reap` is optional here.
   * @default 60_000
   */
  readonly graceMs?: number;
  /**
   * Bodies over this are not kept (the record marks them omitted). At most 1.5 MiB: a SQLite row
   * of a Durable Object holds at most 2 MB.
   * @default 1_048_576
   */
  readonly maxResponseBytes?: number;
}

export interface DurableObjectStore extends IdempotencyStore, AbandonedRecords, IncarnationLeases {
  /** The shard count the store was made with. */
  readonly shards: number;
}

const MAX_BODY_BYTES = 1.5 * 1024 * 1024;

/**
 * A store on Cloudflare Durable Objects, for a Worker: `durableObjectStore({ namespace: env.IDEMPOTENCY })`.
 * Each claim is one synchronous transaction in one object, decided on that object's clock; the
 * object's alarm deletes records when their window ends.
 */
export function durableObjectStore(options: DurableObjectStoreOptions): DurableObjectStore {
  const read = optionReader('durableObjectStore()', options);
  const namespace = read.driver('namespace', ['idFromName', 'get'], 'a Durable Object namespace binding (env.IDEMPOTENCY) of the IdempotencyObject class');
  const shards = read.integer('shards', { default: 32, min: 1, max: 10_000 });
  const maxResponseBytes = read.integer('maxResponseBytes', { default: DEFAULT_MAX_RESPONSE_BYTES, max: MAX_BODY_BYTES });
  const graceMs = read.integer('graceMs', { default: 60_000 });
  read.done();

  async function call<T>(shard: number, op: Operation, input: object): Promise<T> {
    const stub = namespace.get(namespace.idFromName(`idemkit:${shard}`) as never);
    let response: Response;
    try {
      response = await stub.fetch(`https://idemkit/${op}`, { method: 'POST', body: JSON.stringify(input), headers: { 'content-type': 'application/json' } });
    } catch (cause) {
      throw new StoreUnavailableError(`durableObjectStore: the object of shard ${shard} did not answer ${op}`, { cause });
    }
    if (!response.ok) throw new StoreUnavailableError(`durableObjectStore: the object of shard ${shard} answered ${op} with ${response.status}: ${await response.text()}`);
    return (await response.json()) as T;
  }
  const shardOf = (ref: RecordRef) => hashOf(ref.scope, ref.key) % shards;
  const onShard = <T>(ref: RecordRef, op: Operation, input: object) => {
    checkRecordRef(ref);
    return call<T>(shardOf(ref), op, { scope: ref.scope, key: ref.key, ...input });
  };
  const fenced = async (ref: RecordRef, op: Operation, input: object) => {
    if (!(await onShard<WireFenced>(ref, op, input)).ok) throw new LeaseLostError();
  };
  const everyShard = <T>(op: Operation, input: object) => Promise.all(Array.from({ length: shards }, (_, shard) => call<T>(shard, op, input)));

  return {
    name: 'durable-objects',
    maxResponseBytes,
    shards,
    async claim(ref, fingerprint, o): Promise<Claim> {
      const claim = await onShard<WireClaim>(ref, 'claim', { fingerprint, leaseMs: o.leaseMs, windowMs: o.windowMs, incarnation: o.incarnation, graceMs });
      return claim.kind === 'completed' ? { kind: 'completed', response: fromWireResponse(claim.response) } : claim;
    },
    async renew(ref, token, leaseMs) {
      return (await onShard<WireFenced>(ref, 'renew', { token, leaseMs, graceMs })).ok;
    },
    checkpoint: (ref, token, point, data) => fenced(ref, 'checkpoint', { token, point, data }),
    complete: (ref, token, response) => fenced(ref, 'complete', { token, response: toWireResponse(fitResponse(response, maxResponseBytes)), graceMs }),
    release: (ref, token) => fenced(ref, 'release', { token }),
    async get(ref): Promise<IdempotencyRecord | undefined> {
      const record = await onShard<WireRecord | null>(ref, 'get', {});
      return record === null ? undefined : fromWireRecord(record);
    },
    // Shard by shard, so that `limit` bounds what is deleted in all.
    async reap(limit = 1000) {
      let left = checkInteger('limit', limit, { default: 1000, min: 1 });
      for (let shard = 0; shard < shards && left > 0; shard++) left -= (await call<{ n: number }>(shard, 'reap', { limit: left })).n;
      return limit - left;
    },
    async listAbandoned(limit = 100) {
      const max = checkInteger('limit', limit, { default: 100, min: 1 });
      const found = (await everyShard<WireRecord[]>('abandoned', { limit: max })).flat();
      return found.sort((a, b) => a.leaseUntil - b.leaseUntil).slice(0, max).map(fromWireRecord);
    },
    async endLeasesOf(incarnation) {
      checkIncarnation(incarnation);
      return (await everyShard<{ n: number }>('end-leases', { incarnation, graceMs })).reduce((sum, { n }) => sum + n, 0);
    },
  };
}

/**
 * FNV-1a over the UTF-16 units of scope and key. It only spreads records over objects: two that
 * collide share an object, where (scope, key) tells them apart.
 */
function hashOf(scope: string, key: string): number {
  let h = 0x811c9dc5;
  const text = `${scope}\u0000${key}`;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}
