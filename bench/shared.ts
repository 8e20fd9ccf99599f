/** What the orchestrator (run.ts), the child server (server.ts) and the raw store bench share. */
import type { IdempotencyStore } from 'idemkit';

/** Nest runs on its Express platform (`@nestjs/platform-express`). */
export type Framework = 'fastify' | 'express' | 'koa' | 'nest';
/** `redis` is the Redis store on ioredis, `redis-node` the same store on node-redis (`redis`). */
export type StoreKind = 'none' | 'memory' | 'sqlite' | 'postgres' | 'redis' | 'redis-node';
/** Every store measured, in order; `BENCH_STORES=memory,sqlite` narrows it (options.ts). */
export const ALL_STORES: ReadonlyArray<Exclude<StoreKind, 'none'>> = ['memory', 'sqlite', 'postgres', 'redis', 'redis-node'];
export type Workload = 'new-key' | 'replay' | 'contention' | 'no-key';

/**
 * Who makes the route idempotent: nobody (the bare framework), idemkit, or one of the npm peers
 * (bench/peers/*.ts). `BENCH_PEERS=node-idempotency,powertools` narrows the peers.
 */
export type Impl = 'bare' | 'idemkit' | 'node-idempotency' | 'express-idempotency' | 'powertools';
export const PEERS: ReadonlyArray<Exclude<Impl, 'bare' | 'idemkit'>> = ['node-idempotency', 'express-idempotency', 'powertools'];
/**
 * What server.ts can serve: an Impl, or `floor` (Redis on ioredis only, counted by
 * `npm run bench:instructions`): the round trips any race-correct layer makes, and no idempotency logic.
 */
export type ServerImpl = Impl | 'floor';

/** The contention workload: this many connections… */
export const CONTENTION_CONNECTIONS = 64;
/** …share this many keys at a time; the key set rotates every CONTENTION_CONNECTIONS requests. */
export const CONTENTION_KEYS = 8;
/** Keys with this prefix have their executions counted one by one (contention and race check). */
export const TRACKED_KEY_PREFIXES = ['ct-', 'race-'];

export const ROUTE = '/charges';
/** The one request body every workload sends, byte for byte. */
export const BODY = JSON.stringify({ amount: 1200, currency: 'eur', customer: 'cus_8e03978e', description: 'bench' });
export const CONTENT_TYPE = 'application/json';
/** The replay workload cycles over this many completed keys. */
export const REPLAY_KEYS = 16;
/**
 * The memory store's default bounds (10 000 records or 64 MiB, kept for 24 h) would fill within a
 * second of the new-key workload, after which the store refuses every new key (503 `store-full`:
 * it never drops a record inside its window to make room); the bench lifts both so every request
 * is a plain claim.
 */
export const MEMORY_MAX_RECORDS = 50_000_000;
export const MEMORY_MAX_BYTES = 64 * 1024 ** 3;

/** How server.ts is told what to serve (argv: --framework=… --store=… --delay=… --required=…). */
export interface ServerConfig {
  readonly impl: ServerImpl;
  readonly framework: Framework;
  readonly store: StoreKind;
  /** Handler delay in ms (0: a synchronous handler). */
  readonly delayMs: number;
  /** The middleware's `required` option; false for the no-key workload (pass-through). */
  readonly required: boolean;
  /** The bench run's nonce, in every key it sends: the server deletes what it stored under it on exit. */
  readonly nonce: string;
}

/**
 * What server.ts hands the Koa and Nest servers (server-koa.ts, server-nest.ts): the bare server
 * without a store, idemkit's with one.
 */
export interface AppSpec {
  readonly store: IdempotencyStore | undefined;
  /** Handler delay in ms (0: the handler answers without awaiting anything). */
  readonly delayMs: number;
  readonly required: boolean;
  /** The one handler body (server.ts): counts the execution and returns `{ id, ok: true }`. */
  execute(key: string | undefined): { readonly id: string; readonly ok: true };
}

/** Child → parent, once listening. */
export interface ListeningMessage {
  readonly type: 'listening';
  readonly port: number;
  /** The control server (`GET /__executions?key=…`). */
  readonly controlPort: number;
}

/** Child → parent, instead of listening: this implementation cannot serve this configuration. */
export interface NotApplicableMessage {
  readonly type: 'not-applicable';
  readonly reason: string;
}

/** Child → parent, in answer to `{ type: 'stats' }`: cumulative counters since start. */
export interface StatsMessage {
  readonly type: 'stats';
  /** process.cpuUsage() of the whole server process (every thread), in µs. */
  readonly userMicros: number;
  readonly systemMicros: number;
  /** How many times the route handler ran. */
  readonly handled: number;
  /** Executions beyond the first for tracked keys (contention, race): double executions. */
  readonly duplicates: number;
  readonly rssBytes: number;
  /**
   * µs spent inside the store's `claim` and `complete` while store timing was on (in-process
   * stores only: their work is done inside the call, so this is the store's own work, in the
   * server, under load). 0 for other stores.
   */
  readonly storeMicros: number;
}

/** Parent → child: turn store timing on or off (off during the timed runs). */
export interface TimeStoreMessage {
  readonly type: 'time-store';
  readonly on: boolean;
}

export type ChildMessage = ListeningMessage | NotApplicableMessage | StatsMessage;

export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
