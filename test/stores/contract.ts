/**
 * The store contract (src/kit/contract/, shipped as `idemkit/kit`), run with vitest: every
 * IdempotencyStore backend runs this suite unchanged.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ContractContext } from 'idemkit/kit';
import { describeStoreContract as describeWith } from 'idemkit/kit';

export type { ContractContext };

export function describeStoreContract(name: string, setup: () => Promise<ContractContext> | ContractContext): void {
  describeWith(name, setup, { describe, it, expect, beforeAll, afterAll });
}
