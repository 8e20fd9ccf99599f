// idemkit/check: a conformance runner for any HTTP endpoint that takes an Idempotency-Key.
export { runCheck, CASE_IDS } from './run.js';
export type { CaseResult, CheckReport, RunOptions, Verdict } from './run.js';
export { CASES } from './cases.js';
export type { CheckCase, Outcome, Tier } from './cases.js';
export { resolveConfig, loadConfigFile, parseHeaderLines } from './config.js';
export type { CheckConfig, ResolvedConfig } from './config.js';
export { formatReport } from './report.js';
export { raceCase, DEFAULT_BODY } from './race.js';
export type { RaceOptions, RaceResult, RaceRound, RaceTarget } from './race.js';
export { CheckConfigError, CheckRequestError, CliUsageError, TargetUnreachableError } from './errors.js';
export type { RequestFailure } from './errors.js';
