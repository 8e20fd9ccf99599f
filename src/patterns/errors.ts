/**
 * Errors of idemkit/patterns. Bad options and identifiers are `InvalidOptionError`s (from core),
 * which name the option or field.
 */
import { CodedError, IdemkitError } from '../core/errors.js';
import type { ErrorCode } from '../core/errors.js';

/** A state name the state machine does not declare. */
export class UnknownStateError extends IdemkitError {
  static readonly code = 'UNKNOWN_STATE' satisfies ErrorCode;
  readonly state: string;
  /** Where the name came from: `from`, `to`, or a definition's target. */
  readonly field: string;

  constructor(field: string, state: string, known: readonly string[]) {
    super(UnknownStateError.code, `Unknown state ${JSON.stringify(state)} in \`${field}\`; the machine declares ${known.map((s) => JSON.stringify(s)).join(', ')}`);
    this.state = state;
    this.field = field;
  }
}

/** A transition the state machine does not allow. */
export class IllegalTransitionError extends IdemkitError {
  static readonly code = 'ILLEGAL_TRANSITION' satisfies ErrorCode;
  readonly from: string;
  readonly to: string;

  /** `from` is `*` when no state at all may move to `to` (it is an initial state). */
  constructor(from: string, to: string, allowed: readonly string[]) {
    const targets = allowed.length === 0 ? 'none (it is final)' : allowed.map((s) => JSON.stringify(s)).join(', ');
    super(
      IllegalTransitionError.code,
      from === '*'
        ? `Illegal transition to ${JSON.stringify(to)}: no state may move to it (it is initial)`
        : `Illegal transition ${JSON.stringify(from)} -> ${JSON.stringify(to)}; from ${JSON.stringify(from)} the machine allows ${targets}`,
    );
    this.from = from;
    this.to = to;
  }
}

/** A state machine definition that cannot be used (an undeclared target, a malformed entry). */
export class InvalidStateMachineError extends IdemkitError {
  static readonly code = 'INVALID_STATE_MACHINE' satisfies ErrorCode;
  /** The state whose entry is wrong. */
  readonly state: string | undefined;

  constructor(message: string, state?: string) {
    super(InvalidStateMachineError.code, `Invalid state machine: ${message}`);
    this.state = state;
  }
}

/** An optimistic update kept losing to concurrent writers for longer than its retries allowed. */
export class VersionConflictError extends IdemkitError {
  static readonly code = 'VERSION_CONFLICT' satisfies ErrorCode;
  /** How many attempts were made (retries + 1). */
  readonly attempts: number;

  constructor(attempts: number, detail = '') {
    super(VersionConflictError.code, `The row's version changed under every one of ${attempts} attempt(s)${detail ? `: ${detail}` : ''}`);
    this.attempts = attempts;
  }
}

/** insertOnce found neither its new row nor the existing one: the row was deleted each time in between. */
export class RowVanishedError extends IdemkitError {
  static readonly code = 'ROW_VANISHED' satisfies ErrorCode;

  constructor(table: string) {
    super(RowVanishedError.code, `insertOnce: the row with this key in ${table} was deleted between the insert and the read, every time`);
  }
}

/**
 * `idempotent(fn)`: the call with this key ran once, but its result cannot be given back (it was
 * larger than the store keeps, or not JSON). Thrown to the first call when its result is not JSON,
 * and to every repeat; the call is not run again.
 */
export class ResultNotKeptError extends CodedError { static readonly code = 'ERR_IDEMKIT_RESULT_NOT_KEPT' satisfies ErrorCode; }
