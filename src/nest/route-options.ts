import type { EngineOverrides } from '../core/engine.js';
import { MOUNT_OPTIONS, ROUTE_OPTIONS } from '../core/engine.js';
import { InvalidOptionError } from '../core/errors.js';
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

/** The options a route may set: the core's, as every adapter reads them. */
export { ROUTE_OPTIONS };

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
    if (MOUNT_OPTIONS.has(key)) read.fail(key as keyof IdempotentRouteOptions, 'is an option of IdempotencyModule.forRoot(), not of a route: set it there');
  }
  read.accept(...ROUTE_OPTIONS);
  read.done();
  return options;
}
