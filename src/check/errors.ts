import { IdemkitError } from '../core/errors.js';

/** The check could not start: a bad flag, file or URL (exit code 2). */
export class CheckConfigError extends IdemkitError {
  constructor(message: string) {
    super('ERR_IDEMKIT_CHECK_CONFIG', message);
  }
}

/**
 * The target cannot be tested: nothing listens, it does not speak HTTP, it never answers, or it
 * refuses the baseline request (exit code 2: the target was not judged, so nothing FAILed).
 */
export class TargetUnreachableError extends IdemkitError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_IDEMKIT_CHECK_UNREACHABLE', message, options);
  }
}

/** Why one request got no HTTP answer. */
export type RequestFailure = 'refused' | 'timeout' | 'protocol' | 'network' | 'too-large';

/** One request got no usable HTTP answer; `kind` says why (`too-large`: an answer over `maxResponseBytes`). */
export class CheckRequestError extends IdemkitError {
  readonly kind: RequestFailure;

  constructor(kind: RequestFailure, message: string, options?: { cause?: unknown }) {
    super('ERR_IDEMKIT_CHECK_REQUEST', message, options);
    this.kind = kind;
  }
}
