/** RFC 9457 problem+json answers of the service, and the crash switch used by the fault scenarios. */
export interface Answer {
  readonly status: number;
  readonly body: unknown;
  readonly problem?: boolean;
}

/**
 * The service's own problem types: a URN it defines (an identifier, not a locator, as idemkit's
 * `urn:idemkit:problem:<slug>`). A real service would use an address of its own documentation.
 */
export const PROBLEM_TYPE_BASE = 'urn:example:payments:problem:';

export function problem(status: number, slug: string, title: string, detail: string): Answer {
  return { status, problem: true, body: { type: PROBLEM_TYPE_BASE + slug, title, status, detail } };
}

/** An error the route turns into a problem answer after the transaction rolled back. */
export class ProblemError extends Error {
  constructor(readonly answer: Answer) {
    super((answer.body as { detail: string }).detail);
  }
}

/**
 * CRASH_AT names one point where the process kills itself with SIGKILL (no cleanup, no flush):
 * `after_transition` (callback: order PAID, ledger not yet written), `after_commit` (POST /orders
 * committed, response not yet sent), `pay_phase_2` (the channel charged, our record does not know).
 */
export const crashAt = process.env.CRASH_AT ?? '';

export function crashPoint(name: string): void {
  if (crashAt === name) {
    console.log(`CRASH_AT=${name}: killing the process`);
    process.kill(process.pid, 'SIGKILL');
  }
}
