// idemkit/check: a conformance runner for any HTTP endpoint that takes an Idempotency-Key.
export { runCheck, CASE_IDS } from './run.js';
export type { CaseResult, CheckReport, RunOptions, Verdict } from './run.js';
export type { CheckConfig } from './config.js';
export { formatReport } from './report.js';
export { raceCase } from './race.js';
export type { RaceOptions, RaceResult, RaceTarget } from './race.js';
export { CheckConfigError, CheckRequestError, CliUsageError, TargetUnreachableError } from './errors.js';
