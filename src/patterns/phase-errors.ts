import { IdemkitError } from '../core/errors.js';

/**
 * Why a phases definition or a resume was refused. Stable codes:
 * - `EMPTY_PHASE_NAME`, `DUPLICATE_PHASE`, `RESERVED_PHASE`, `NO_PHASES`, `INVALID_PHASE`: the definition is wrong;
 *   thrown when it is built (or first run), naming the phase.
 * - `UNKNOWN_PHASE`: a record's recovery point names no phase of the definition (it was renamed
 *   or removed while records were in flight).
 * - `DEFINITION_MISMATCH`, `CORRUPT_RECOVERY_DATA`: the record was written by another definition,
 *   or its recovery data is not what phases write.
 * - `OUTPUT_NOT_JSON`: a phase returned something that cannot be kept as JSON (a BigInt, a cycle).
 * - `TRANSACTIONAL_MODE`: phases run under whole-request transactional mode (they commit one by
 *   one; that mode commits once at the end).
 */
export class PhaseError extends IdemkitError {
  /** The phase the problem is about, when there is one. */
  readonly phase: string | undefined;

  constructor(code: string, message: string, phase?: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.phase = phase;
  }
}
