import type { DynamicModule, ExecutionContext, InjectionToken, ModuleMetadata, OptionalFactoryDependency, Provider } from '@nestjs/common';
import { Module, SetMetadata, createParamDecorator } from '@nestjs/common';
import { APP_INTERCEPTOR, DiscoveryModule, DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { IdempotencyStore } from '../core/store.js';
import type { RegisteredContext } from '../core/index.js';
import type { IdempotencyOptions } from '../core/options.js';
import { IdempotencyInterceptor, contextOf } from './interceptor.js';
import type { NestRequest } from './reader.js';
import type { IdempotentRouteOptions } from './route-options.js';
import { checkRouteConfig } from './route-options.js';
import { IDEMPOTENT_METADATA, IdempotencyRoutes } from './routes.js';

/** The module's options: idemkit's, with a `scope` hook that receives the platform's request. */
export type IdempotencyModuleOptions<Store extends IdempotencyStore = IdempotencyStore, Transactional extends boolean = boolean> = IdempotencyOptions<
  NestRequest,
  Store,
  Transactional
>;

/** The injection token of the module's options (`forRoot`'s value, or what `forRootAsync`'s factory returned). */
export const IDEMPOTENCY_OPTIONS = Symbol.for('idemkit.nest.options');

/** `forRootAsync`'s options: the options come from a factory with injected dependencies (a store built from config). */
export interface IdempotencyModuleAsyncOptions {
  /** Modules that export what `inject` names. */
  readonly imports?: ModuleMetadata['imports'];
  /** The tokens whose values the factory receives, in order. */
  readonly inject?: ReadonlyArray<InjectionToken | OptionalFactoryDependency>;
  /** Receives the values of `inject`, in its order. */
  readonly useFactory: (...deps: never[]) => IdempotencyModuleOptions | Promise<IdempotencyModuleOptions>;
}

/**
 * The Idempotency-Key decision matrix for NestJS (Express or Fastify platform). Import it once, in
 * the root module; it protects the controllers and routes marked `@Idempotent()`. Its interceptor
 * is global and runs after guards, so authentication answers before any key is claimed.
 */
export class IdempotencyModule {
  static forRoot<Store extends IdempotencyStore, Transactional extends boolean = false>(
    options: IdempotencyModuleOptions<Store, Transactional>,
  ): DynamicModule {
    return IdempotencyModule.with([], { provide: IDEMPOTENCY_OPTIONS, useValue: options });
  }

  static forRootAsync(options: IdempotencyModuleAsyncOptions): DynamicModule {
    const { imports = [], inject = [], useFactory } = options;
    return IdempotencyModule.with(imports, { provide: IDEMPOTENCY_OPTIONS, useFactory, inject: [...inject] });
  }

  private static with(imports: NonNullable<ModuleMetadata['imports']>, options: Provider): DynamicModule {
    return {
      module: IdempotencyModule,
      global: true,
      imports: [...imports, DiscoveryModule],
      providers: [
        options,
        {
          provide: IdempotencyRoutes,
          useFactory: (given: IdempotencyModuleOptions, discovery: DiscoveryService, scanner: MetadataScanner) => new IdempotencyRoutes(given, discovery, scanner),
          inject: [IDEMPOTENCY_OPTIONS, DiscoveryService, MetadataScanner],
        },
        { provide: APP_INTERCEPTOR, useFactory: (routes: IdempotencyRoutes) => new IdempotencyInterceptor(routes), inject: [IdempotencyRoutes] },
      ],
      exports: [IDEMPOTENCY_OPTIONS],
    };
  }
}
// Decorators applied as functions: src/ is compiled without `experimentalDecorators`.
Module({})(IdempotencyModule);

/**
 * Protects a controller's routes, or one route, with the module's options or `options` (each
 * overriding the module's; a route's over its controller's). `@Idempotent(false)` on a route
 * leaves it unprotected in a protected controller. Option names are checked here; values when the
 * application starts.
 */
export function Idempotent(options?: IdempotentRouteOptions | boolean): ClassDecorator & MethodDecorator {
  return (target: object, property?: string | symbol, descriptor?: PropertyDescriptor) => {
    const where = property === undefined ? (target as { name?: string }).name : `${(target.constructor as { name?: string }).name}.${String(property)}`;
    const config = checkRouteConfig(options, where ?? 'a controller');
    if (property === undefined) return void SetMetadata(IDEMPOTENT_METADATA, config)(target as never);
    SetMetadata(IDEMPOTENT_METADATA, config)(target, property, descriptor!);
  };
}

/**
 * The idempotency context of a request `@Idempotent` protects (undefined when it passed through),
 * typed by the store registered through `Register`. Annotate the parameter with
 * `ContextFor<typeof store, true>` to type `ctx.tx` from the store instead.
 */
export const IdempotencyCtx: () => ParameterDecorator = createParamDecorator((_data: unknown, context: ExecutionContext) =>
  contextOf(context.switchToHttp().getRequest<object>()),
) as () => ParameterDecorator;

/** The idempotency context of a request (what `@IdempotencyCtx()` gives), for code that holds the request. */
export function idempotencyContext(request: object): RegisteredContext | undefined {
  return contextOf(request) as RegisteredContext | undefined;
}
