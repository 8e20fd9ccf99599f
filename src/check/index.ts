// idemkit/check: a conformance runner for any HTTP endpoint that takes an Idempotency-Key.
export { raceCase, DEFAULT_BODY } from './race.js';
export type { RaceOptions, RaceResult, RaceRound, RaceTarget } from './race.js';
export { CheckConfigError, CheckRequestError, TargetUnreachableError } from './errors.js';
export type { RequestFailure } from './errors.js';
