import { createHash } from 'node:crypto';
import { InvalidOptionError } from '../core/errors.js';
import { optionReader } from '../core/option-reader.js';
import { MissingMessageIdError } from './errors.js';
import type { AdapterOptions, ConsumeStats, DeliveryTx, Settlement } from './delivery.js';
import { deliver, idHeaderOption, newStats, prepareDelivery } from './delivery.js';

/** The part of an amqplib message the adapter reads (declared here, so the driver stays the user's). */
export interface AmqpMessage {
  readonly content: Uint8Array;
  readonly fields: { readonly deliveryTag: number; readonly redelivered: boolean };
  readonly properties: { readonly messageId?: unknown; readonly headers?: Readonly<Record<string, unknown>> | undefined };
}

/** The part of an amqplib `Channel` (promise API) the adapter uses. */
export interface AmqpChannel<Msg extends AmqpMessage = AmqpMessage> {
  consume(queue: string, onMessage: (message: Msg | null) => void, options?: { noAck?: boolean }): Promise<{ consumerTag: string }>;
  ack(message: Msg, allUpTo?: boolean): void;
  nack(message: Msg, allUpTo?: boolean, requeue?: boolean): void;
  cancel(consumerTag: string): Promise<unknown>;
}

export interface AmqpIdOptions {
  /** Header read when `properties.messageId` is absent (e.g. `x-message-id`, `event-id`). */
  readonly idHeader?: string;
  /**
   * Last resort: the SHA-256 of the body. Two distinct messages with identical bodies then count
   * as one, so enable it only when a body is unique per logical message. @default false
   */
  readonly hashFallback?: boolean;
}

export interface AmqpConsumeOptions<Msg extends AmqpMessage = AmqpMessage> extends AdapterOptions<Msg>, AmqpIdOptions {}

export interface AmqpConsumer {
  readonly consumerTag: string;
  readonly stats: ConsumeStats;
  /** Stops new deliveries and waits for the in-flight handlers to commit and ack. */
  cancel(): Promise<void>;
}

/**
 * The id of a message, in order: `properties.messageId`, the configured header, the SHA-256 of the
 * body (only with `hashFallback`). Throws MissingMessageIdError naming what was looked at.
 */
export function amqpMessageId(message: AmqpMessage, options: AmqpIdOptions = {}): string {
  const fromProperty = text(message.properties?.messageId);
  if (fromProperty) return fromProperty;
  if (options.idHeader !== undefined) {
    const fromHeader = text(message.properties?.headers?.[options.idHeader]);
    if (fromHeader) return fromHeader;
  }
  if (options.hashFallback) return 'sha256:' + createHash('sha256').update(message.content).digest('hex');
  const header = options.idHeader === undefined ? '' : ` and no \`${options.idHeader}\` header`;
  throw new MissingMessageIdError(
    `the AMQP message has no properties.messageId${header}; publish with { messageId }, configure \`idHeader\`, or enable \`hashFallback\``,
  );
}

/** A header value as text: AMQP headers arrive as strings, Buffers (long strings) or numbers. */
function text(value: unknown): string | undefined {
  if (typeof value === 'string') return value || undefined;
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8') || undefined;
  return undefined;
}

/**
 * Consumes `queue` with manual acknowledgements, processing each message id once:
 * - processed: the record and the handler's writes commit, THEN the message is acked;
 * - duplicate: acked without running the handler (reported through `onDuplicate`);
 * - handler threw: nothing committed; `nack` with `requeue` (default true) so it is retried;
 * - no usable id: `nack` without requeue (dead-lettered if the queue has a DLX), `onError` gets
 *   a MissingMessageIdError.
 * A crash between commit and ack redelivers the message, which then finds its record: a duplicate.
 * Concurrency is the channel's prefetch (`channel.prefetch(n)`).
 */
export async function amqpConsumeOnce<Msg extends AmqpMessage, T, Options extends AmqpConsumeOptions<Msg> = AmqpConsumeOptions<Msg>>(
  channel: AmqpChannel<Msg>,
  queue: string,
  options: Options,
  handler: (message: Msg, tx: DeliveryTx<Options>) => Promise<T>,
): Promise<AmqpConsumer> {
  if (!channel || typeof channel.consume !== 'function') throw new InvalidOptionError('channel', 'expected an amqplib Channel (promise API)');
  if (typeof queue !== 'string') throw new InvalidOptionError('queue', 'expected a queue name');
  if (typeof handler !== 'function') throw new InvalidOptionError('handler', 'expected an async function');
  const read = optionReader('amqpConsumeOnce()', options);
  const delivery = prepareDelivery(read, options);
  const idHeader = idHeaderOption(read.value('idHeader'));
  const idOptions: AmqpIdOptions = { idHeader, hashFallback: read.boolean('hashFallback', { default: false }) };
  read.done();
  const stats = newStats();
  const inFlight = new Set<Promise<void>>();

  const idOf = (message: Msg) => amqpMessageId(message, idOptions);
  const settlement: Settlement<Msg> = {
    ack: (message) => channel.ack(message),
    refuse: (message) => channel.nack(message, false, false),
    // Handed back after the other delivery's lease could end (a second at most): the broker
    // redelivers a requeued message at once.
    retryLater: async (message, retryAfterMs) => {
      await new Promise((resolve) => setTimeout(resolve, Math.min(retryAfterMs, 1000)));
      channel.nack(message, false, true);
    },
    failed: (message) => channel.nack(message, false, delivery.requeue),
  };
  // The options were checked to carry exactly one of db and store, so `tx` is what the handler expects.
  const handle = (message: Msg) => deliver(delivery, stats, message, idOf, (tx) => handler(message, tx as DeliveryTx<Options>), settlement);

  const { consumerTag } = await channel.consume(
    queue,
    (message) => {
      if (message === null) return; // the broker cancelled the consumer (queue deleted)
      const running = handle(message).finally(() => inFlight.delete(running));
      inFlight.add(running);
    },
    { noAck: false },
  );
  return {
    consumerTag,
    stats,
    async cancel() {
      await channel.cancel(consumerTag);
      while (inFlight.size > 0) await Promise.all(inFlight);
    },
  };
}
