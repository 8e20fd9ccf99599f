import { IdemkitError } from '../core/errors.js';
import type { PhaseErrorCode } from '../core/errors.js';

/**
 * Why a phases definition or a resume was refused; one class for a family of codes, all listed in
 * the error table (src/core/error-codes.ts):
 * - `EMPTY_PHASE_NAME`, `DUPLICATE_PHASE`, `RESERVED_PHASE`, `NO_PHASES`, `INVALID_PHASE`: the definition is wrong;
 *   thrown when it is built (or first run), naming the phase.
 * - `NO_CONTEXT`: `run()` without a request's idempotency context.
 * - `UNKNOWN_PHASE`: a record's recovery point names no phase of the definition (it was renamed
 *   or removed while records were in flight).
 * - `DEFINITION_MISMATCH`, `CORRUPT_RECOVERY_DATA`: the record was written by another definition,
 *   or its recovery data is not what phases write.
 * - `OUTPUT_NOT_JSON`: a phase returned something that cannot be kept as JSON (a BigInt, a cycle).
 *
 * Phases run under whole-request transactional mode are refused with `TransactionalModeError`
 * (`ERR_IDEMKIT_TRANSACTIONAL_MODE`), as `ctx.beginTransaction()` is: one refusal, one code.
 */
export class PhaseError extends IdemkitError {
  declare readonly code: PhaseErrorCode;
  /** The phase the problem is about, when there is one. */
  readonly phase: string | undefined;

  constructor(code: PhaseErrorCode, message: string, phase?: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.phase = phase;
  }
}
