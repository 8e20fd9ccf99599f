import { CodedError, IdemkitError } from '../core/errors.js';
import type { ErrorCode } from '../core/errors.js';

/**
 * A message carried no usable id and no fallback was configured. Deduplication needs a stable id
 * per logical message, so such a message is refused (dead-lettered) rather than processed unguarded.
 */
export class MissingMessageIdError extends IdemkitError {
  static readonly code = 'ERR_IDEMKIT_MESSAGE_ID_MISSING' satisfies ErrorCode;

  constructor(detail: string) {
    super(MissingMessageIdError.code, `Message id missing: ${detail}`);
  }
}

/** A message id or consumer name is present but unusable (empty, too long, not a string). */
export class InvalidMessageIdError extends CodedError { static readonly code = 'ERR_IDEMKIT_MESSAGE_ID_INVALID' satisfies ErrorCode; }

/**
 * consumeOnce found a record in its reserved namespace that it did not write (another fingerprint):
 * something else writes records under idemkit's reserved scopes.
 */
export class MessageScopeClashError extends CodedError { static readonly code = 'ERR_IDEMKIT_MESSAGE_SCOPE_CLASH' satisfies ErrorCode; }

export type WebhookFailure = 'missing-headers' | 'bad-timestamp' | 'stale-timestamp' | 'bad-signature';

/** A webhook request failed verification; nothing was recorded or run. */
export class WebhookVerificationError extends IdemkitError {
  static readonly code = 'ERR_IDEMKIT_WEBHOOK_UNVERIFIED' satisfies ErrorCode;
  readonly reason: WebhookFailure;

  constructor(reason: WebhookFailure, detail: string) {
    super(WebhookVerificationError.code, detail);
    this.reason = reason;
  }
}

/** The framework handed the webhook adapter a parsed body instead of the raw bytes the signature covers. */
export class WebhookRawBodyError extends CodedError { static readonly code = 'ERR_IDEMKIT_WEBHOOK_RAW_BODY' satisfies ErrorCode; }
