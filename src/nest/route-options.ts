import type { EngineOverrides } from '../core/engine.js';
import type { RouteNaming } from '../core/route-options.js';
import { readRouteOverrides } from '../core/route-options.js';
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

/** How `@Idempotent(…)` applied to `where` (a controller, `Controller.method`) is named in errors. */
export function routeNaming(where: string): RouteNaming {
  return {
    path: '@Idempotent()',
    suffix: ` of ${where}`,
    expected: 'true, false or an object of per-route options',
    mount: 'IdempotencyModule.forRoot()',
    mountHint: 'set it there',
  };
}

/**
 * Checks what `@Idempotent` was given, where it is applied: its kind and its option names. The
 * values are checked with the module's options, when the application starts (`IdempotencyRoutes`).
 */
export function checkRouteConfig(config: unknown, where: string): IdempotentConfig {
  if (config === false) return false;
  readRouteOverrides(config === true ? undefined : config, routeNaming(where));
  return config === undefined || config === true ? {} : (config as IdempotentRouteOptions);
}
