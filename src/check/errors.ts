import { CodedError } from '../core/errors.js';
import type { ErrorCode } from '../core/errors.js';

/** The check could not start: a bad flag, file or URL (exit code 2). */
export class CheckConfigError extends CodedError { static readonly code = 'ERR_IDEMKIT_CHECK_CONFIG' satisfies ErrorCode; }

/**
 * The target cannot be tested: nothing listens, it does not speak HTTP, it never answers, or it
 * refuses the baseline request (exit code 2: the target was not judged, so nothing FAILed).
 */
export class TargetUnreachableError extends CodedError { static readonly code = 'ERR_IDEMKIT_CHECK_UNREACHABLE' satisfies ErrorCode; }

/**
 * An `idemkit` store command (migrate, inspect, list, purge, reap, stats) could not run: a bad
 * flag, a store URL it does not support, a driver package that is not installed (exit code 2).
 */
export class CliUsageError extends CodedError { static readonly code = 'ERR_IDEMKIT_CLI_USAGE' satisfies ErrorCode; }

/** Why one request got no HTTP answer. */
export type RequestFailure = 'refused' | 'timeout' | 'protocol' | 'network' | 'too-large';

/** One request got no usable HTTP answer; `kind` says why (`too-large`: an answer over `maxResponseBytes`). */
export class CheckRequestError extends CodedError {
  static readonly code = 'ERR_IDEMKIT_CHECK_REQUEST' satisfies ErrorCode;
  readonly kind: RequestFailure;

  constructor(kind: RequestFailure, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.kind = kind;
  }
}
