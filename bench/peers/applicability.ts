/** Which peer can be measured where; anything else is "n/a" in the tables, with the reason. */
import type { Framework, Impl, StoreKind } from '../shared.js';
import { PEERS } from '../shared.js';

/** The stores each peer has an adapter for (in this bench). */
export const PEER_STORES: Record<(typeof PEERS)[number], readonly StoreKind[]> = {
  'node-idempotency': ['memory', 'redis'],
  'express-idempotency': ['redis'],
  powertools: ['redis'],
};

export function notApplicable(impl: Impl, framework: Framework, store: StoreKind): string | undefined {
  if (impl === 'bare' || impl === 'idemkit') return undefined;
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
