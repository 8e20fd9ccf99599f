import { randomFillSync } from 'node:crypto';

const TOKEN_BYTES = 16;
// One getrandom call fills 256 tokens: a crypto call per claim cost more than the claim itself.
const pool = Buffer.allocUnsafe(TOKEN_BYTES * 256);
let offset = pool.length;

/** A fresh owner token: 128 random bits, never a counter that could restart after a delete. */
export function newOwnerToken(): string {
  if (offset === pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  const token = pool.toString('hex', offset, offset + TOKEN_BYTES);
  offset += TOKEN_BYTES;
  return token;
}
