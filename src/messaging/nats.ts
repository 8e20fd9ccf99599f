import { InvalidOptionError } from '../core/errors.js';
import { optionReader } from '../core/option-reader.js';
import type { SqlExecutor } from '../drivers/sql-executor.js';
import { messageIdOption } from './consume.js';
import { MissingMessageIdError } from './errors.js';
import type { AdapterOptions, ConsumeStats, Delivery, DeliveryTx, Settlement } from './delivery.js';
import { deliver, idHeaderOption, newStats, prepareDelivery } from './delivery.js';

/** The header JetStream deduplicates on within the stream's `duplicate_window`. */
export const NATS_MSG_ID = 'Nats-Msg-Id';

/** What a JetStream publish answers (a `PubAck` fits). */
export interface NatsPubAck {
  readonly stream: string;
  readonly seq: number;
  /** True when the server dropped the message as a repeat of a `Nats-Msg-Id` inside the window. */
  readonly duplicate: boolean;
}

/** The part of a `@nats-io/jetstream` client the publish helper uses. */
export interface NatsPublisher {
  publish(subject: string, payload?: Uint8Array | string, options?: { msgID?: string }): Promise<NatsPubAck>;
}

/** The part of a `JsMsg` the consumer helper uses. */
export interface NatsJsMessage {
  readonly data: Uint8Array;
  readonly subject: string;
  readonly headers?: { get(name: string): string } | undefined;
  readonly info: { readonly stream: string; readonly streamSequence: number };
  ack(): void;
  nak(millis?: number): void;
  term(reason?: string): void;
}

/**
 * Publishes with `Nats-Msg-Id` set, so the stream drops a repeat of the same id that arrives
 * within its `duplicate_window` (default 2 minutes): a publisher retrying after a lost PubAck does
 * not create a second message. Beyond the window the repeat is stored again; the consumer side
 * (natsConsumeOnce) catches it. Resolves with the PubAck (`duplicate: true` when dropped).
 */
export async function natsPublishOnce(js: NatsPublisher, subject: string, payload: Uint8Array | string, msgId: string): Promise<NatsPubAck> {
  if (!js || typeof js.publish !== 'function') throw new InvalidOptionError('js', 'expected a JetStream client (jetstream(nc))');
  return js.publish(subject, payload, { msgID: messageIdOption(msgId) });
}

export interface NatsIdOptions {
  /** Header holding the id. @default 'Nats-Msg-Id' */
  readonly idHeader?: string;
  /**
   * Without an id header, use `<stream>:<stream sequence>`. That catches only the broker's own
   * redeliveries of ONE stored message (ack timeout, nak, consumer restart). It does not catch a
   * publisher's retry outside the duplicate window (a new stored message, a new sequence), and
   * sequences restart when a stream is deleted and recreated. @default false
   */
  readonly sequenceFallback?: boolean;
}

export interface NatsConsumeOptions<Msg extends NatsJsMessage = NatsJsMessage> extends AdapterOptions<Msg>, NatsIdOptions {
  /** Redelivery delay for a failed handler, passed to `nak(ms)`; 0 redelivers at once. @default 0 */
  readonly nakDelayMs?: number;
}

/** The id of a JetStream message; throws MissingMessageIdError naming the header it looked for. */
export function natsMessageId(message: NatsJsMessage, options: NatsIdOptions = {}): string {
  const header = options.idHeader ?? NATS_MSG_ID;
  const id = message.headers?.get(header);
  if (id) return id;
  if (options.sequenceFallback) return `${message.info.stream}:${message.info.streamSequence}`;
  throw new MissingMessageIdError(
    `the JetStream message on ${JSON.stringify(message.subject)} has no \`${header}\` header; publish with natsPublishOnce (msgID) or enable \`sequenceFallback\``,
  );
}

/**
 * Consumes JetStream messages one at a time (e.g. `await consumer.consume()`), processing each id
 * once: processed or duplicate → `ack()` after the commit; handler threw → `nak(nakDelayMs)`, or
 * `term()` with `requeue: false`; no id → `term()` and `onError`. `done` resolves with the counters
 * when the iterable ends (`messages.stop()` / `close()`); `stats` is live.
 */
export function natsConsumeOnce<Msg extends NatsJsMessage, T, Options extends NatsConsumeOptions<Msg> = NatsConsumeOptions<Msg>>(
  messages: AsyncIterable<Msg>,
  options: Options,
  handler: (message: Msg, tx: DeliveryTx<Options>) => Promise<T>,
): NatsConsumer {
  if (!messages || typeof (messages as Partial<AsyncIterable<Msg>>)[Symbol.asyncIterator] !== 'function') {
    throw new InvalidOptionError('messages', 'expected an async iterable of JetStream messages (await consumer.consume())');
  }
  if (typeof handler !== 'function') throw new InvalidOptionError('handler', 'expected an async function');
  const read = optionReader('natsConsumeOnce()', options);
  const delivery = prepareDelivery(read, options);
  const idHeader = idHeaderOption(read.value('idHeader'));
  const idOptions: NatsIdOptions = { idHeader, sequenceFallback: read.boolean('sequenceFallback', { default: false }) };
  const nakDelayMs = read.integer('nakDelayMs', { default: 0 });
  read.done();
  const stats = newStats();
  // The options were checked to carry exactly one of db and store, so `tx` is what the handler expects.
  const run = handler as (message: Msg, tx: SqlExecutor | undefined) => Promise<T>;
  return { stats, done: loop(messages, delivery, run, stats, idOptions, nakDelayMs) };
}

/** A running JetStream consume-once loop. */
export interface NatsConsumer {
  readonly stats: ConsumeStats;
  /** Resolves with the counters when the message iterable ends; rejects if the iterable fails. */
  readonly done: Promise<ConsumeStats>;
}

async function loop<Msg extends NatsJsMessage, T>(
  messages: AsyncIterable<Msg>,
  delivery: Delivery<Msg>,
  handler: (message: Msg, tx: SqlExecutor | undefined) => Promise<T>,
  stats: ConsumeStats,
  idOptions: NatsIdOptions,
  nakDelayMs: number,
): Promise<ConsumeStats> {
  const idOf = (message: Msg) => natsMessageId(message, idOptions);
  const settlement: Settlement<Msg> = {
    ack: (message) => message.ack(),
    // No reason string: `+TERM <reason>` needs nats-server 2.10; a bare `+TERM` works everywhere.
    refuse: (message) => message.term(),
    retryLater: (message, retryAfterMs) => message.nak(retryAfterMs),
    failed: (message) => (delivery.requeue ? message.nak(nakDelayMs || undefined) : message.term()),
  };
  for await (const message of messages) await deliver(delivery, stats, message, idOf, (tx) => handler(message, tx), settlement);
  return stats;
}
