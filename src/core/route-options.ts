import type { EngineOverrides, IdempotencyEngine } from './engine.js';
import { InvalidOptionError } from './errors.js';
import type { IdempotencyOptions } from './options.js';
import { optionReader } from './option-reader.js';

/** The options one route may override (`EngineOverrides`), as each adapter's per-route settings read them. */
export const ROUTE_OPTIONS = [
  'required',
  'leaseMs',
  'inFlight',
  'waitTimeoutMs',
  'retryAfterMs',
  'scope',
  'previousScope',
  'fingerprintFields',
  'previousFingerprintFields',
] as const satisfies ReadonlyArray<keyof EngineOverrides>;

/**
 * The options only the middleware (plugin, module) takes, which a route cannot change: where
 * records live, what is replayed… A route that sets one is told where it belongs.
 */
export const MOUNT_OPTIONS: ReadonlySet<string> = new Set([
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
] satisfies ReadonlyArray<Exclude<keyof IdempotencyOptions, keyof EngineOverrides>>);

/** How an adapter's per-route settings are named in errors, in its own words. */
export interface RouteNaming {
  /** Where the overrides are written: `config.idempotency`, `route()`, `@Idempotent()`. */
  readonly path: string;
  /** After each option's name: ` of /orders`, ` of OrdersController.create`. */
  readonly suffix?: string;
  /** What a route is told it was given instead: @default 'an object of per-route options' */
  readonly expected?: string;
  /** Whose options the mount-wide ones are: `the plugin`, `the middleware`, `IdempotencyModule.forRoot()`. */
  readonly mount: string;
  /** How to move a mount-wide option there: `set it where the plugin is registered`. */
  readonly mountHint: string;
}

/**
 * One route's overrides, read the same way by every adapter: nothing is none; an object may set
 * the options of `ROUTE_OPTIONS`. A mount-wide option is refused saying where it belongs, an
 * unknown one with a hint at the name meant, each named as the adapter writes it. The values are
 * checked by `routeEngine`, against the options they override. Answers the options given (an
 * option set to undefined is left out, so it keeps the mount's value).
 */
export function readRouteOverrides<Req>(config: unknown, naming: RouteNaming): EngineOverrides<Req> {
  if (config === undefined) return {};
  const where = naming.path + (naming.suffix ?? '');
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw new InvalidOptionError(where, `expected ${naming.expected ?? 'an object of per-route options'}`);
  }
  const given = config as EngineOverrides<Req>;
  const read = optionReader(naming.path, given, { path: naming.path, suffix: naming.suffix });
  for (const key of Object.keys(given)) {
    if (MOUNT_OPTIONS.has(key)) read.fail(key as keyof EngineOverrides, `is an option of ${naming.mount}, not of a route: ${naming.mountHint}`);
  }
  const overrides: Record<string, unknown> = {};
  for (const name of ROUTE_OPTIONS) {
    const value = read.value(name);
    if (value !== undefined) overrides[name] = value;
  }
  read.done();
  return overrides as EngineOverrides<Req>;
}

/**
 * The engine of one route: `engine` itself when the route overrides nothing, else one derived
 * from it now, when the route is set up (its values checked there, named as `naming` writes
 * them), so that no request pays for the route's options.
 */
export function routeEngine<Req>(engine: IdempotencyEngine<Req>, overrides: EngineOverrides<Req>, naming: RouteNaming): IdempotencyEngine<Req> {
  if (Object.keys(overrides).length === 0) return engine;
  return engine.withOverrides(overrides, { path: naming.path, suffix: naming.suffix });
}
