/**
 * idemkit/messaging: consume-once for at-least-once deliveries. The message id is recorded in the
 * same transaction as the consumer's writes; duplicates are acknowledged and skipped. The broker
 * and framework shapes its functions accept are structural (an application passes its own channel,
 * message, request), and its defaults are documented in docs/messaging.md rather than exported.
 */
export { consumeOnce } from './consume.js';
export type { ConsumeOptions, SqlConsumeOptions, StoreConsumeOptions } from './consume.js';
export { migrateProcessed, processedTableSql, reapProcessed } from './table.js';
export type { ReapOptions } from './table.js';
export type { DeliveryEvent, DeliveryEvents, DeliveryTx } from './delivery.js';
export { amqpConsumeOnce, amqpMessageId } from './amqp.js';
export type { AmqpConsumeOptions, AmqpConsumer, AmqpIdOptions } from './amqp.js';
export { natsConsumeOnce, natsMessageId, natsPublishOnce } from './nats.js';
export type { NatsConsumeOptions, NatsConsumer, NatsIdOptions } from './nats.js';
export { signWebhook, verifyWebhook } from './webhook-verify.js';
export type { VerifiedWebhook, VerifyOptions, WebhookSecret } from './webhook-verify.js';
export { webhookExpress, webhookFastify, webhookHandler, webhookReceiver } from './webhook.js';
export type { WebhookEvent, WebhookOptions, SqlWebhookOptions, StoreWebhookOptions, WebhookReceiver } from './webhook.js';
export { InvalidMessageIdError, MessageScopeClashError, MissingMessageIdError, WebhookRawBodyError, WebhookVerificationError } from './errors.js';
export type { WebhookFailure } from './errors.js';
