/** Which peer can be measured where; anything else is "n/a" in the tables, with the reason. */
import type { Framework, Impl, StoreKind } from '../shared.js';
import { PEERS } from '../shared.js';

/** The stores each peer has an adapter for (in this bench). */
export const PEER_STORES: Record<(typeof PEERS)[number], readonly StoreKind[]> = {
  'node-idempotency': ['memory', 'redis'],
  'express-idempotency': ['redis'],
  powertools: ['redis'],
};

/**
 * Why no peer runs on Koa or Nest: none of them has an adapter for it installed here, and the
 * bench's glue (bench/peers/*.ts) is written for Fastify and Express.
 */
const NO_ADAPTER: Record<(typeof PEERS)[number], Partial<Record<Framework, string>>> = {
  'node-idempotency': {
    koa: 'no Koa package: it has Express, Fastify and NestJS ones',
    nest: '@node-idempotency/nestjs is not installed',
  },
  'express-idempotency': { koa: 'Express middleware only', nest: 'Express middleware only; not wired into Nest' },
  powertools: {
    koa: 'a Lambda handler wrapper, glued here to Express and Fastify only',
    nest: 'a Lambda handler wrapper, glued here to Express and Fastify only',
  },
};

export function notApplicable(impl: Impl, framework: Framework, store: StoreKind): string | undefined {
  if (impl === 'bare' || impl === 'idemkit') return undefined;
  const noAdapter = NO_ADAPTER[impl][framework];
  if (noAdapter !== undefined) return noAdapter;
  if (impl === 'express-idempotency' && framework !== 'express') return 'Express middleware only';
  if (!PEER_STORES[impl].includes(store)) {
    return impl === 'node-idempotency'
      ? 'adapters for memory and Redis only'
      : impl === 'powertools'
        ? 'cache layer is Redis/Valkey (others: DynamoDB)'
        : 'adapters: memory (array scan), Redis, MongoDB';
  }
  return undefined;
}

export { PEERS };
