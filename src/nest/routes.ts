import type { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { RequestReader } from '../core/engine.js';
import { IdempotencyEngine } from '../core/engine.js';
import { readRouteOverrides, routeEngine } from '../core/route-options.js';
import type { IdempotencyOptions } from '../core/options.js';
import type { NestBody, NestRequest } from './reader.js';
import { nestReader } from './reader.js';
import type { IdempotentConfig } from './route-options.js';
import { routeNaming } from './route-options.js';

/** The metadata key `@Idempotent` records its config under (on a controller class or a route handler). */
export const IDEMPOTENT_METADATA = 'idemkit:idempotent';
/** Nest's own metadata keys (@nestjs/common's constants), read to learn how a route answers. */
const ROUTE_ARGS_METADATA = '__routeArguments__';
/** `RouteParamtypes.RESPONSE` and `RouteParamtypes.NEXT` in a route argument's metadata key. */
const RESPONSE_PARAMS = new Set(['1', '2']);

/** One protected route: its engine (the module's, or derived for the route's options) and reader. */
export interface ProtectedRoute {
  readonly engine: IdempotencyEngine<NestRequest>;
  readonly reader: RequestReader<NestRequest, NestBody>;
  /** `@Res()`/`@Next()` without `passthrough`: Nest sends nothing itself, the handler does. */
  readonly answersItself: boolean;
  readonly name: string;
}

type Handler = (...args: never[]) => unknown;
type Metadata = { getMetadata(key: string, target: object, property?: string): unknown };
const reflect = Reflect as unknown as Metadata;

/**
 * The module's engine and the engines of the routes `@Idempotent` marks, one per route, derived
 * once: at startup for every controller Nest knows (so that a bad route option fails
 * `app.init()`, naming the route), or at a route's first request otherwise.
 */
export class IdempotencyRoutes {
  readonly engine: IdempotencyEngine<NestRequest>;
  private readonly routes = new Map<Handler, ProtectedRoute | null>();

  constructor(
    options: IdempotencyOptions<NestRequest>,
    private readonly discovery?: DiscoveryService,
    private readonly scanner?: MetadataScanner,
  ) {
    // The module's options are checked here, when Nest builds the module.
    this.engine = new IdempotencyEngine<NestRequest>(options, { path: 'IdempotencyModule.forRoot()' });
  }

  /** Nest's lifecycle hook: every controller route's options are checked before the app listens. */
  onModuleInit(): void {
    if (this.discovery === undefined || this.scanner === undefined) return;
    for (const wrapper of this.discovery.getControllers()) {
      const controller = wrapper.metatype as (abstract new (...args: never[]) => unknown) | null | undefined;
      if (typeof controller !== 'function' || controller.prototype === undefined) continue;
      const prototype = controller.prototype as Record<string, unknown>;
      for (const name of this.scanner.getAllMethodNames(prototype)) {
        const handler = prototype[name];
        if (typeof handler === 'function') this.route(handler as Handler, controller);
      }
    }
  }

  /** The protected route a handler is, or undefined when `@Idempotent` does not cover it. */
  route(handler: Handler, controller: object): ProtectedRoute | undefined {
    let route = this.routes.get(handler);
    if (route === undefined) this.routes.set(handler, (route = this.build(handler, controller)));
    return route ?? undefined;
  }

  private build(handler: Handler, controller: object): ProtectedRoute | null {
    const own = reflect.getMetadata(IDEMPOTENT_METADATA, handler) as IdempotentConfig | undefined;
    const inherited = reflect.getMetadata(IDEMPOTENT_METADATA, controller) as IdempotentConfig | undefined;
    if (own === false || (own === undefined && (inherited === undefined || inherited === false))) return null;
    const config: Exclude<IdempotentConfig, false> = Object.assign({}, inherited || {}, own);
    const name = `${(controller as { name?: string }).name ?? 'a controller'}.${handler.name}`;
    const naming = routeNaming(name);
    const engine = routeEngine(this.engine, readRouteOverrides<NestRequest>(config, naming), naming);
    return { engine, reader: nestReader, answersItself: answersItself(controller, handler.name), name };
  }
}

/** Nest's own rule (RouterExecutionContext.isResponseHandled): a `@Res()` or `@Next()` without `passthrough`. */
function answersItself(controller: object, method: string): boolean {
  const args = reflect.getMetadata(ROUTE_ARGS_METADATA, controller, method) as Record<string, { data?: { passthrough?: boolean } }> | undefined;
  if (args === undefined) return false;
  return Object.entries(args).some(([key, arg]) => RESPONSE_PARAMS.has(key.split(':')[0]!) && arg.data?.passthrough !== true);
}
