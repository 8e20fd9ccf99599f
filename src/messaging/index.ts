/**
 * idemkit/messaging: consume-once for at-least-once deliveries. The message id is recorded in the
 * same transaction as the consumer's writes; duplicates are acknowledged and skipped.
 */
export { consumeOnce, MAX_CONSUMER_LENGTH, MAX_MESSAGE_ID_LENGTH } from './consume.js';
export type { ConsumeOptions, ConsumeResult, SqlConsumeOptions, StoreConsumeOptions, StoreConsumeResult } from './consume.js';
export { DEFAULT_PROCESSED_TABLE, DEFAULT_RETENTION_MS, migrateProcessed, processedTableSql, reapProcessed } from './table.js';
export type { ReapOptions } from './table.js';
export type { AdapterOptions, ConsumeStats, DeliveryEvent, DeliveryEvents, DeliveryTx } from './delivery.js';
export { amqpConsumeOnce, amqpMessageId } from './amqp.js';
export type { AmqpChannel, AmqpConsumeOptions, AmqpConsumer, AmqpIdOptions, AmqpMessage } from './amqp.js';
export { NATS_MSG_ID, natsConsumeOnce, natsMessageId, natsPublishOnce } from './nats.js';
export type { NatsConsumeOptions, NatsConsumer, NatsIdOptions, NatsJsMessage, NatsPubAck, NatsPublisher } from './nats.js';
export { DEFAULT_TOLERANCE_SEC, MIN_SECRET_BYTES, signWebhook, verifyWebhook } from './webhook-verify.js';
export type { HeadersLike, VerifiedWebhook, VerifyOptions, WebhookSecret } from './webhook-verify.js';
export { webhookExpress, webhookFastify, webhookHandler, webhookReceiver } from './webhook.js';
export type {
  ExpressLikeRequest,
  ExpressLikeResponse,
  FastifyLikeInstance,
  FastifyLikeReply,
  WebhookEvent,
  WebhookOptions,
  SqlWebhookOptions,
  StoreWebhookOptions,
  WebhookCommonOptions,
  WebhookReceiver,
  WebhookReply,
} from './webhook.js';
export { InvalidMessageIdError, MessageScopeClashError, MissingMessageIdError, WebhookRawBodyError, WebhookVerificationError } from './errors.js';
export type { WebhookFailure } from './errors.js';
