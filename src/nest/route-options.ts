import type { EngineOverrides } from '../core/engine.js';
import { InvalidOptionError } from '../core/errors.js';
import type { IdempotencyOptions } from '../core/options.js';
import { optionReader } from '../core/option-reader.js';
import type { NestRequest } from './reader.js';

/**
 * A controller's or a route's own settings, given to `@Idempotent(…)`: the options that change how
 * one request is claimed and answered, each overriding the module's (a route's over its
 * controller's). `@Idempotent(false)` on a route leaves it unprotected inside a protected controller.
 */
export interface IdempotentRouteOptions extends EngineOverrides<NestRequest> {
  /** Overrides the module's `required` for these routes. */
  readonly required?: boolean;
}

/** What `@Idempotent` records: `false`, or the options (an empty object protects with the module's). */
export type IdempotentConfig = false | IdempotentRouteOptions;

/** The options a route may set, as `IdempotentRouteOptions` declares them (the Fastify adapter's `ROUTE_OPTIONS`). */
export const ROUTE_OPTIONS = ['required', 'leaseMs', 'inFlight', 'waitTimeoutMs', 'retryAfterMs', 'scope', 'fingerprintFields'] as const satisfies ReadonlyArray<
  keyof IdempotentRouteOptions
>;

/** Options of the module that a route cannot change (where records live, what is replayed…). */
const MODULE_OPTIONS: ReadonlySet<string> = new Set([
  'store',
  'methods',
  'header',
  'keyPolicy',
  'windowMs',
  'renewLease',
  'maxExecutionMs',
  'maxBodyBytes',
  'replayHeaders',
  'transactional',
  'storeTimeoutMs',
  'failOpen',
  'onError',
  'logger',
  'events',
  'redactKeys',
  'problemTypeBase',
] satisfies ReadonlyArray<Exclude<keyof IdempotencyOptions, keyof IdempotentRouteOptions>>);

/**
 * Checks what `@Idempotent` was given, where it is applied: its kind and its option names. The
 * values are checked with the module's options, when the application starts (`checkedOverrides`).
 */
export function checkRouteConfig(config: unknown, where: string): IdempotentConfig {
  if (config === undefined || config === true) return {};
  if (config === false) return false;
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw new InvalidOptionError(`@Idempotent() of ${where}`, 'expected true, false or an object of per-route options');
  }
  const options = config as IdempotentRouteOptions;
  const read = optionReader('@Idempotent()', options, { path: '@Idempotent()', suffix: ` of ${where}` });
  for (const key of Object.keys(options)) {
    if (MODULE_OPTIONS.has(key)) read.fail(key as keyof IdempotentRouteOptions, 'is an option of IdempotencyModule.forRoot(), not of a route: set it there');
  }
  read.accept(...ROUTE_OPTIONS);
  read.done();
  return options;
}
