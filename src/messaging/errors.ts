import { IdemkitError } from '../core/errors.js';

/**
 * A message carried no usable id and no fallback was configured. Deduplication needs a stable id
 * per logical message, so such a message is refused (dead-lettered) rather than processed unguarded.
 */
export class MissingMessageIdError extends IdemkitError {
  constructor(detail: string) {
    super('ERR_IDEMKIT_MESSAGE_ID_MISSING', `Message id missing: ${detail}`);
  }
}

/** A message id or consumer name is present but unusable (empty, too long, not a string). */
export class InvalidMessageIdError extends IdemkitError {
  constructor(detail: string) {
    super('ERR_IDEMKIT_MESSAGE_ID_INVALID', detail);
  }
}

export type WebhookFailure = 'missing-headers' | 'bad-timestamp' | 'stale-timestamp' | 'bad-signature';

/** A webhook request failed verification; nothing was recorded or run. */
export class WebhookVerificationError extends IdemkitError {
  readonly reason: WebhookFailure;

  constructor(reason: WebhookFailure, detail: string) {
    super('ERR_IDEMKIT_WEBHOOK_UNVERIFIED', detail);
    this.reason = reason;
  }
}

/** The framework handed the webhook adapter a parsed body instead of the raw bytes the signature covers. */
export class WebhookRawBodyError extends IdemkitError {
  constructor(detail: string) {
    super('ERR_IDEMKIT_WEBHOOK_RAW_BODY', detail);
  }
}
