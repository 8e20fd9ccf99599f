import { InvalidOptionError } from '../core/errors.js';
import type { Clock, IdempotencyStore } from '../core/store.js';
import type { OptionReader } from '../core/option-reader.js';
import type { SqlDatabase, SqlExecutor } from '../drivers/sql-executor.js';
import type { PreparedConsumer, StoreConsumeResult } from './consume.js';
import { consumerOption, messageIdOption, sqlConsumer, storeConsumer } from './consume.js';
import { clockOption, executorOption, retentionOption, tableOption } from './table.js';

/** Options every broker adapter shares: where records go and how outcomes are reported. */
export interface AdapterOptions<Msg> {
  /** SQL: the record commits with the handler's writes. Give `db` or `store`. */
  readonly db?: SqlExecutor | SqlDatabase;
  /** Non-SQL store: at most once per lease, not atomic with the handler's writes (see docs). */
  readonly store?: IdempotencyStore;
  readonly consumer: string;
  readonly table?: string;
  readonly retentionMs?: number;
  readonly leaseMs?: number;
  readonly clock?: Clock;
  /** Redeliver a message whose handler threw. With `false` it is dead-lettered/terminated. @default true */
  readonly requeue?: boolean;
  /** Called for a handler error, a refused message (no id) and a failed ack; never throws into the broker loop. */
  readonly onError?: (error: unknown, message: Msg) => void;
  /** Called when a delivery was a duplicate and was acknowledged without running the handler. */
  readonly onDuplicate?: (messageId: string, message: Msg) => void;
  /**
   * Listeners told how each delivery ended: `processed` (the handler ran and its record
   * committed), `duplicate` (acknowledged without running), `inFlight` (another consumer holds
   * the id; handed back), `failed` (the handler or the store threw; requeued or dead-lettered),
   * `refused` (no usable id). Events nobody listens to are never built.
   */
  readonly events?: DeliveryEvents<Msg>;
}

/** How one delivery ended, as `events` listeners see it. */
export interface DeliveryEvent<Msg> {
  readonly consumer: string;
  /** Undefined for a `refused` delivery (it had no usable id). */
  readonly messageId: string | undefined;
  readonly message: Msg;
  /** From the delivery's arrival to its outcome (the claim, the handler and the commit), in ms. */
  readonly durationMs: number;
  /** What failed, for `failed` and `refused`. */
  readonly error?: unknown;
}

export interface DeliveryEvents<Msg> {
  readonly processed?: (event: DeliveryEvent<Msg>) => void;
  readonly duplicate?: (event: DeliveryEvent<Msg>) => void;
  readonly inFlight?: (event: DeliveryEvent<Msg>) => void;
  readonly failed?: (event: DeliveryEvent<Msg>) => void;
  readonly refused?: (event: DeliveryEvent<Msg>) => void;
}

/** `performance.now()` when someone listens to deliveries, else 0 (no clock read for nobody). */
function deliveryStart<Msg>(delivery: Delivery<Msg>): number {
  return delivery.events === undefined ? 0 : performance.now();
}

/** Tells the `events` listener of one outcome, if there is one; a listener that throws goes to `onError`. */
function tell<Msg>(
  delivery: Delivery<Msg>,
  name: keyof DeliveryEvents<Msg>,
  messageId: string | undefined,
  message: Msg,
  startedAt: number,
  error?: unknown,
): void {
  const listener = delivery.events?.[name];
  if (listener === undefined) return;
  try {
    listener({ consumer: delivery.consumer, messageId, message, durationMs: Math.round((performance.now() - startedAt) * 10) / 10, error });
  } catch (failure) {
    report(delivery, failure, message);
  }
}

/**
 * The `tx` a consumer's handler gets for the options it was given: the transaction its record
 * commits in with `db`, undefined with `store` (either, when the options' type does not say).
 */
export type DeliveryTx<Options> = Options extends { readonly db: SqlExecutor | SqlDatabase }
  ? SqlExecutor
  : Options extends { readonly store: IdempotencyStore }
    ? undefined
    : SqlExecutor | undefined;

/** Counters of one adapter, for logs and tests. */
export interface ConsumeStats {
  processed: number;
  duplicates: number;
  /** Handler threw; the message was negatively acknowledged. */
  failed: number;
  /** No usable message id: refused without running the handler. */
  refused: number;
  /** Another delivery of the same id holds the store lease (store variant only). */
  inFlight: number;
}

export function newStats(): ConsumeStats {
  return { processed: 0, duplicates: 0, failed: 0, refused: 0, inFlight: 0 };
}

/** An adapter's shared options, resolved when the consumer starts; a delivery reads nothing else. */
export interface Delivery<Msg> {
  readonly consumer: string;
  /** Records the message and runs the handler: options checked and statements written already. */
  readonly consume: PreparedConsumer;
  readonly requeue: boolean;
  readonly onError: ((error: unknown, message: Msg) => void) | undefined;
  readonly onDuplicate: ((messageId: string, message: Msg) => void) | undefined;
  /** The listeners given, or undefined when `events` was not (then no delivery reads a clock for them). */
  readonly events: DeliveryEvents<Msg> | undefined;
}

/**
 * Checks the options every adapter shares, once, when the consumer starts: a bad option found
 * per message would fail every delivery and requeue it forever. The adapter reads its own options
 * from the same reader, then calls `done()`.
 */
export function prepareDelivery<Msg>(read: OptionReader<AdapterOptions<Msg>>, options: AdapterOptions<Msg>): Delivery<Msg> {
  const db = read.value('db');
  const store = read.value('store');
  if ((db === undefined) === (store === undefined)) read.fail('db', 'give exactly one of `db` (a SqlExecutor) or `store`');
  const executor = db === undefined ? undefined : executorOption(db);
  if (store !== undefined && typeof store?.claim !== 'function') read.fail('store', 'expected an IdempotencyStore');
  const consumer = consumerOption(read.value('consumer'));
  const table = tableOption(read.value('table'));
  const base = { consumer, retentionMs: retentionOption(read.value('retentionMs')), clock: clockOption(read.value('clock')) };
  const leaseMs = read.duration('leaseMs', { default: 60_000, min: 1 });
  // Bound, so a callback written as a method sees the options object as `this`, as it did when it
  // was called through them.
  const onError = read.function('onError')?.bind(options);
  const onDuplicate = read.function('onDuplicate')?.bind(options);
  const listeners = read.object('events');
  let events: DeliveryEvents<Msg> | undefined;
  if (listeners !== undefined) {
    events = {
      processed: listeners.function('processed'),
      duplicate: listeners.function('duplicate'),
      inFlight: listeners.function('inFlight'),
      failed: listeners.function('failed'),
      refused: listeners.function('refused'),
    };
    listeners.done();
  }
  return {
    consumer,
    consume: executor !== undefined ? sqlConsumer(base, executor, table) : storeConsumer(base, store!, leaseMs),
    requeue: read.boolean('requeue', { default: true }),
    onError,
    onDuplicate,
    events,
  };
}

type Outcome = StoreConsumeResult<unknown> | { readonly status: 'failed'; readonly error: unknown };

/** Runs the prepared consumer for one delivery; a handler error becomes an outcome, never a rejection. */
async function runDelivery<Msg>(delivery: Delivery<Msg>, messageId: string, run: (tx: SqlExecutor | undefined) => Promise<unknown>): Promise<Outcome> {
  try {
    return await delivery.consume(messageId, run);
  } catch (error) {
    return { status: 'failed', error };
  }
}

function report<Msg>(delivery: Delivery<Msg>, error: unknown, message: Msg): void {
  try {
    delivery.onError?.(error, message);
  } catch {
    // A throwing reporter must not break the consume loop.
  }
}

function notifyDuplicate<Msg>(delivery: Delivery<Msg>, messageId: string, message: Msg): void {
  try {
    delivery.onDuplicate?.(messageId, message);
  } catch {
    // Reporting only; the duplicate is already acknowledged.
  }
}

/** Validates an adapter's `idHeader`: a header name, or undefined for the adapter's default. */
export function idHeaderOption(value: unknown): string | undefined {
  if (value !== undefined && (typeof value !== 'string' || value === '')) throw new InvalidOptionError('idHeader', 'expected a non-empty header name');
  return value;
}

/**
 * The id of a delivery, checked like consumeOnce checks it: a missing or unusable id is refused
 * (dead-lettered / terminated) instead of failing, which would requeue it forever.
 */
function deliveryId(find: () => string): string {
  return messageIdOption(find());
}

/** How a broker answers a message, for each way its delivery can end. */
export interface Settlement<Msg> {
  /** Processed, or a duplicate: done with it. */
  readonly ack: (message: Msg) => void;
  /** No usable id: never to come again (dead-lettered, terminated). */
  readonly refuse: (message: Msg) => void;
  /** Another delivery holds the id's lease: handed back, to come again once that lease could end. */
  readonly retryLater: (message: Msg, retryAfterMs: number) => void | Promise<void>;
  /** The handler or the store threw: handed back, or dead-lettered without `requeue`. */
  readonly failed: (message: Msg) => void;
}

/**
 * One delivery, from its arrival to the broker's answer: its id (refused without one), the
 * prepared consumer, the counters, the listeners, then `settle`'s answer. An answer that throws
 * (the channel or connection closed) goes to `onError`: the broker redelivers the message, and
 * its record answers duplicate.
 */
export async function deliver<Msg>(
  delivery: Delivery<Msg>,
  stats: ConsumeStats,
  message: Msg,
  idOf: (message: Msg) => string,
  run: (tx: SqlExecutor | undefined) => Promise<unknown>,
  settle: Settlement<Msg>,
): Promise<void> {
  const answer = (act: (message: Msg) => void) => {
    try {
      act(message);
    } catch (error) {
      report(delivery, error, message);
    }
  };
  const startedAt = deliveryStart(delivery);
  let messageId: string;
  try {
    messageId = deliveryId(() => idOf(message));
  } catch (error) {
    stats.refused++;
    report(delivery, error, message);
    tell(delivery, 'refused', undefined, message, startedAt, error);
    answer(settle.refuse);
    return;
  }
  const outcome = await runDelivery(delivery, messageId, run);
  switch (outcome.status) {
    case 'processed':
      stats.processed++;
      tell(delivery, 'processed', messageId, message, startedAt);
      answer(settle.ack);
      return;
    case 'duplicate':
      stats.duplicates++;
      tell(delivery, 'duplicate', messageId, message, startedAt);
      answer(settle.ack);
      notifyDuplicate(delivery, messageId, message);
      return;
    case 'in_flight':
      stats.inFlight++;
      tell(delivery, 'inFlight', messageId, message, startedAt);
      try {
        await settle.retryLater(message, outcome.retryAfterMs);
      } catch (error) {
        report(delivery, error, message);
      }
      return;
    case 'failed':
      stats.failed++;
      report(delivery, outcome.error, message);
      tell(delivery, 'failed', messageId, message, startedAt, outcome.error);
      answer(settle.failed);
      return;
  }
}
