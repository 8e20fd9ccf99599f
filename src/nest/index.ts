/**
 * idemkit/nest: the Idempotency-Key decision matrix for NestJS 11 on the Express and the Fastify
 * platform. `IdempotencyModule.forRoot(options)` (or `forRootAsync`) in the root module,
 * `@Idempotent()` on a controller or a route, `@IdempotencyCtx()` for the context.
 */
export { IDEMPOTENCY_OPTIONS, Idempotent, IdempotencyCtx, IdempotencyModule, idempotencyContext } from './module.js';
export type { IdempotencyModuleAsyncOptions, IdempotencyModuleOptions } from './module.js';
export { IdempotencyInterceptor } from './interceptor.js';
export type { IdempotentRouteOptions } from './route-options.js';
export type { NestRequest } from './reader.js';
