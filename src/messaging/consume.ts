import { InvalidOptionError } from '../core/errors.js';
import { internalScope } from '../core/namespaces.js';
import type { Clock, IdempotencyStore, RecordRef, StoredResponse } from '../core/store.js';
import { checkDuration, optionReader } from '../core/option-reader.js';
import type { SqlDatabase, SqlExecutor } from '../drivers/sql-executor.js';
import { InvalidMessageIdError, MessageScopeClashError, MissingMessageIdError } from './errors.js';
import { clockOption, executorOption, retentionOption, tableOption } from './table.js';

/** Longest consumer name and message id (the key columns are VARCHAR(128) and VARCHAR(255)). */
export const MAX_CONSUMER_LENGTH = 128;
export const MAX_MESSAGE_ID_LENGTH = 255;

interface CommonOptions {
  /** Names the consuming service or handler: the same message id is processed once per consumer. */
  readonly consumer: string;
  /** The message's stable id (broker message id, event id, `webhook-id`). */
  readonly messageId: string;
  /** How long the record outlives processing, in ms; duplicates later than this are not caught. @default 7 days */
  readonly retentionMs?: number;
  readonly clock?: Clock;
}

export interface SqlConsumeOptions extends CommonOptions {
  /**
   * Where the record and the handler's writes go: a `SqlExecutor` from `sqlExecutor()`. With a
   * joined executor (the caller's open transaction) both join it through a savepoint.
   */
  readonly db: SqlExecutor | SqlDatabase;
  /** @default 'idemkit_processed_messages' */
  readonly table?: string;
  readonly store?: undefined;
}

export interface StoreConsumeOptions extends CommonOptions {
  /**
   * A non-SQL store (Redis, memory): claim with a lease, run, complete. NOT atomic with the
   * handler's writes: pair it with a data-layer guard (see docs/messaging.md).
   */
  readonly store: IdempotencyStore;
  /** How long a claim is trusted before another delivery may take the message over. @default 60_000 */
  readonly leaseMs?: number;
  readonly db?: undefined;
}

export type ConsumeOptions = SqlConsumeOptions | StoreConsumeOptions;

export type ConsumeResult<T> = { readonly status: 'processed'; readonly value: T } | { readonly status: 'duplicate' };

/** The store variant can also find another delivery of the message still holding its lease. */
export type StoreConsumeResult<T> = ConsumeResult<T> | { readonly status: 'in_flight'; readonly retryAfterMs: number };

/** Either variant's options, as one shape the reader can name every key of. */
type AnyConsumeOptions = CommonOptions & Partial<Pick<SqlConsumeOptions, 'db' | 'table'> & Pick<StoreConsumeOptions, 'store' | 'leaseMs'>>;

/** Validates a consumer name, naming the option. */
export function consumerOption(value: unknown): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_CONSUMER_LENGTH) {
    throw new InvalidOptionError('consumer', `expected a non-empty string of at most ${MAX_CONSUMER_LENGTH} characters, got ${describe(value)}`);
  }
  return value;
}

/** Validates a message id: a missing one is refused (there is nothing to deduplicate on). */
export function messageIdOption(value: unknown): string {
  if (value === undefined || value === null || value === '') {
    throw new MissingMessageIdError('`messageId` is empty; every message needs a stable id to be processed once');
  }
  if (typeof value !== 'string') throw new InvalidMessageIdError(`\`messageId\` must be a string, got ${describe(value)}`);
  if (value.length > MAX_MESSAGE_ID_LENGTH) {
    throw new InvalidMessageIdError(`\`messageId\` is ${value.length} characters; at most ${MAX_MESSAGE_ID_LENGTH} are kept`);
  }
  return value;
}

function describe(value: unknown): string {
  return typeof value === 'string' ? `a string of ${value.length} characters` : typeof value;
}

/**
 * Processes one message once per consumer.
 *
 * SQL: in one transaction, records `(consumer, messageId)` first, then runs `handler(tx)` and
 * commits both. A recorded id answers `{ status: 'duplicate' }` without running the handler. A
 * handler that throws rolls the record back too, so a redelivery retries it. Two concurrent
 * deliveries of one id: the second insert waits on the primary key until the first commits
 * (duplicate) or rolls back (it proceeds).
 *
 * Store: claim with a lease, run `handler()`, complete; a throw releases the claim.
 *
 * An options object is checked, and its consumer prepared (`sqlConsumer` or `storeConsumer`), at
 * its first call; a call with the same object again reads only its `messageId`, so one object may
 * be kept and its `messageId` set per message. Its other options are read once: to change one,
 * pass a new object. The broker adapters and the webhook receivers prepare theirs when they start.
 */
export function consumeOnce<T>(options: SqlConsumeOptions, handler: (tx: SqlExecutor) => Promise<T>): Promise<ConsumeResult<T>>;
export function consumeOnce<T>(options: StoreConsumeOptions, handler: () => Promise<T>): Promise<StoreConsumeResult<T>>;
export function consumeOnce<T>(options: ConsumeOptions, handler: (tx: SqlExecutor) => Promise<T>): Promise<StoreConsumeResult<T>>;
export async function consumeOnce<T>(options: ConsumeOptions, handler: (tx: SqlExecutor) => Promise<T>): Promise<StoreConsumeResult<T>> {
  let consume = preparedConsumers.get(options);
  if (consume === undefined) {
    consume = prepareConsumer(options);
    // Only a consumer whose options all passed is kept: a refused object is checked again next call.
    preparedConsumers.set(options, consume);
  }
  if (typeof handler !== 'function') throw new InvalidOptionError('handler', 'expected an async function');
  return consume(messageIdOption(options.messageId), handler);
}

/** The consumer prepared from each options object `consumeOnce` was called with; weak, so it goes with its object. */
const preparedConsumers = new WeakMap<ConsumeOptions, PreparedConsumer>();

/** Checks every option but `messageId` (each call's own) and prepares the consumer they describe. */
function prepareConsumer(options: ConsumeOptions): PreparedConsumer {
  const read = optionReader<AnyConsumeOptions>('consumeOnce()', options, { aliases: { tx: 'db', id: 'messageId', window: 'retentionMs' } });
  const base: ConsumerBase = {
    consumer: consumerOption(read.value('consumer')),
    retentionMs: retentionOption(read.value('retentionMs')),
    clock: clockOption(read.value('clock')),
  };
  // Each variant reads its own options below; the other variant's are accepted, as they always were.
  read.accept('messageId', 'db', 'store', 'table', 'leaseMs');
  read.done();
  if (options.store !== undefined) {
    if (options.db !== undefined) throw new InvalidOptionError('store', 'give either `db` or `store`, not both');
    return storeConsumer(base, storeOption(options.store), leaseOption(options.leaseMs));
  }
  return sqlConsumer(base, executorOption(options.db), tableOption(options.table));
}

/** The checked options both kinds of prepared consumer share. */
export interface ConsumerBase {
  readonly consumer: string;
  readonly retentionMs: number;
  readonly clock: Clock;
}

/**
 * A consumer whose options were checked and whose statements were written when it was made:
 * processing a message only runs. `messageId` must have passed `messageIdOption`. The handler
 * gets the transaction with `db`, and no argument with `store`.
 */
export type PreparedConsumer = <T>(messageId: string, handler: (tx: SqlExecutor) => Promise<T>) => Promise<StoreConsumeResult<T>>;

/** Validates a store option: anything with the store's `claim`. */
export function storeOption(value: unknown): IdempotencyStore {
  if (!value || typeof (value as Partial<IdempotencyStore>).claim !== 'function') throw new InvalidOptionError('store', 'expected an IdempotencyStore');
  return value as IdempotencyStore;
}

/** Validates a store consumer's lease, in ms. */
export function leaseOption(value: unknown): number {
  return checkDuration('leaseMs', value, { default: 60_000, min: 1 });
}

/** The SQL consumer: its INSERT is written here, once, for the executor's dialect and the table. */
export function sqlConsumer(base: ConsumerBase, db: SqlExecutor, table: string): PreparedConsumer {
  const { consumer, retentionMs, clock } = base;
  const insert =
    db.dialect === 'mysql'
      ? // INSERT IGNORE reports 0 affected rows for the duplicate key; the values are validated, so
        // it hides no truncation.
        `INSERT IGNORE INTO ${table} (consumer, message_id, processed_at, expires_at) VALUES (?, ?, ?, ?)`
      : `INSERT INTO ${table} (consumer, message_id, processed_at, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT (consumer, message_id) DO NOTHING`;
  return async function consumeSql<T>(messageId: string, handler: (tx: SqlExecutor) => Promise<T>): Promise<ConsumeResult<T>> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await db.transaction(async (tx): Promise<ConsumeResult<T>> => {
          const now = clock();
          let affected: number;
          try {
            // The record goes first: its primary key is the lock that makes a concurrent delivery wait.
            ({ affected } = await tx.query(insert, [consumer, messageId, now, now + retentionMs]));
          } catch (error) {
            throw isDeadlock(error) ? new RecordDeadlock(error) : error;
          }
          // Nothing was written; committing the empty transaction is the same as rolling it back.
          if (affected === 0) return { status: 'duplicate' };
          return { status: 'processed', value: await handler(tx) };
        });
      } catch (error) {
        if (!(error instanceof RecordDeadlock)) throw error;
        // InnoDB: when the first of several waiting inserts of one key rolls back, the waiters all
        // hold shared locks and deadlock upgrading them; the victims are rolled back before their
        // handler ran, so trying again is safe. (Joined to a MySQL transaction, the deadlock rolls the
        // caller's whole transaction back: the savepoint rollback then fails and that error surfaces.)
        if (attempt >= DEADLOCK_RETRIES) throw error.cause;
      }
    }
  };
}

const DEADLOCK_RETRIES = 5;

class RecordDeadlock extends Error {
  constructor(cause: unknown) {
    super('deadlock on the processed-message record', { cause });
  }
}

function isDeadlock(error: unknown): boolean {
  const e = error as { code?: unknown; errno?: unknown } | undefined;
  return e?.code === 'ER_LOCK_DEADLOCK' || e?.errno === 1213 || e?.code === '40P01';
}

// An empty body, not `null`: `null` means "omitted" (bodyOmitted), and a store may refuse the
// mix when it reads the record back (the MySQL store did: every duplicate failed as corrupt).
const DONE: StoredResponse = { status: 200, headers: [], body: new Uint8Array(0), bodyOmitted: false };
// One constant fingerprint: a message id has no payload to compare. An HTTP request's fingerprint
// is a SHA-256 in hex, so it can never be this value.
const FINGERPRINT = 'idemkit:message';

/**
 * Where a consumer's records live in a shared store: idemkit's reserved namespace, which no HTTP
 * scope can name (src/core/namespaces.ts), so a tenant can neither block nor replay an event.
 */
export function messageScope(consumer: string): string {
  return internalScope('message', consumer);
}

/**
 * The scope versions before issue 14 used. An HTTP tenant may use the same text, so records there
 * are only read, and only believed when they carry consumeOnce's fingerprint (see `earlierRecord`).
 * Once every record written under it is past its retention window, the read finds nothing.
 */
export function legacyMessageScope(consumer: string): string {
  return `message:${consumer}`;
}

/** The store consumer: claim with a lease, run, complete; its scope is worked out here, once. */
export function storeConsumer(base: ConsumerBase, store: IdempotencyStore, leaseMs: number): PreparedConsumer {
  const { consumer, retentionMs, clock } = base;
  const scope = messageScope(consumer);
  const legacyScope = legacyMessageScope(consumer);
  return async function consumeWithStore<T>(messageId: string, handler: (tx: SqlExecutor) => Promise<T>): Promise<StoreConsumeResult<T>> {
    const ref: RecordRef = { scope, key: messageId };
    const claim = await store.claim(ref, FINGERPRINT, { leaseMs, windowMs: retentionMs });
    switch (claim.kind) {
      case 'completed':
        return { status: 'duplicate' };
      case 'in_flight':
        return { status: 'in_flight', retryAfterMs: claim.retryAfterMs };
      case 'mismatch':
        throw new MessageScopeClashError(
          `The record for message ${JSON.stringify(messageId)} of consumer ${JSON.stringify(consumer)} in idemkit's reserved namespace was written by something else than consumeOnce`,
        );
      case 'acquired':
        break;
    }
    let earlier: Awaited<ReturnType<typeof earlierRecord>>;
    try {
      earlier = await earlierRecord(store, legacyScope, messageId, clock);
      if (earlier?.status === 'duplicate') await store.complete(ref, claim.token, DONE);
    } catch (error) {
      await store.release(ref, claim.token).catch(() => undefined);
      throw error;
    }
    if (earlier?.status === 'in_flight') await store.release(ref, claim.token).catch(() => undefined);
    if (earlier) return earlier;
    let value: T;
    try {
      value = await (handler as () => Promise<T>)();
    } catch (error) {
      // Nothing is remembered for a failed attempt: the redelivery claims the message afresh.
      await store.release(ref, claim.token).catch(() => undefined);
      throw error;
    }
    await store.complete(ref, claim.token, DONE);
    return { status: 'processed', value };
  };
}

/**
 * What a version before issue 14 recorded for the message under the legacy scope: processed
 * (a duplicate now), still held by a live lease (in flight, e.g. an old instance during a rolling
 * deploy), or nothing. A record there without consumeOnce's fingerprint is an HTTP tenant's and
 * is ignored. The lease is compared with `clock`, the consumer's clock, since the record's
 * `leaseUntil` is on the store's: skew between the two moves the moment the lease counts as
 * over, nothing else.
 */
async function earlierRecord(
  store: IdempotencyStore,
  legacyScope: string,
  messageId: string,
  clock: Clock,
): Promise<{ readonly status: 'duplicate' } | { readonly status: 'in_flight'; readonly retryAfterMs: number } | undefined> {
  const record = await store.get({ scope: legacyScope, key: messageId });
  const now = clock();
  // A record past its window is one the claim would also treat as absent (not yet reaped).
  if (record === undefined || record.fingerprint !== FINGERPRINT || record.expiresAt <= now) return undefined;
  if (record.state === 'completed') return { status: 'duplicate' };
  const leaseLeftMs = record.leaseUntil - now;
  return leaseLeftMs > 0 ? { status: 'in_flight', retryAfterMs: leaseLeftMs } : undefined;
}
