import { randomBytes } from 'node:crypto';

/** A fresh owner token: 128 random bits, never a counter that could restart after a delete. */
export function newOwnerToken(): string {
  return randomBytes(16).toString('hex');
}
