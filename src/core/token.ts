import { randomFillSync } from 'node:crypto';
import { InvalidOptionError } from './errors.js';

const TOKEN_BYTES = 16;
/** An incarnation's bytes: half an owner token. */
const INCARNATION_BYTES = TOKEN_BYTES / 2;
// One getrandom call fills 256 tokens: a crypto call per claim cost more than the claim itself.
const pool = Buffer.allocUnsafe(TOKEN_BYTES * 256);
let offset = pool.length;

/**
 * A fresh owner token: 32 hex characters of random bits, never a counter that could restart after
 * a delete. Claimed by an instance with an identity (`startInstance`), its first 16 characters are
 * the incarnation (random once per process start) and the other 16 fresh, so the store can find
 * what one incarnation claimed (`IncarnationLeases.endLeasesOf`); otherwise all 32 are fresh.
 */
export function newOwnerToken(incarnation?: string): string {
  if (offset + TOKEN_BYTES > pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  if (incarnation !== undefined) {
    const token = incarnation + pool.toString('hex', offset, offset + INCARNATION_BYTES);
    offset += INCARNATION_BYTES;
    return token;
  }
  const token = pool.toString('hex', offset, offset + TOKEN_BYTES);
  offset += TOKEN_BYTES;
  return token;
}

/** A fresh incarnation name: 16 hex characters (64 random bits), the first half of its owner tokens. */
export function newIncarnation(): string {
  return newOwnerToken().slice(0, INCARNATION_BYTES * 2);
}

/** True for what `newIncarnation` returns: 16 lowercase hex characters. */
export function isIncarnation(value: unknown): value is string {
  return typeof value === 'string' && /^[0-9a-f]{16}$/.test(value);
}

/** Refuses an `endLeasesOf` argument that is not an incarnation: a shorter prefix would end other owners' leases. */
export function checkIncarnation(value: unknown): asserts value is string {
  if (!isIncarnation(value)) throw new InvalidOptionError('incarnation', 'expected 16 lowercase hex characters (Instance.incarnation)');
}
