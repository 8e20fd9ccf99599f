/**
 * What each runtime's fetch throws for a connection that failed (issue 31), so that a test which
 * provokes one checks its kind as that runtime reports it. Node (undici): `TypeError: fetch failed`
 * caused by an error with a code (UND_ERR_SOCKET for a connection closed, ECONNRESET, ECONNREFUSED);
 * Bun: a TypeError with the code on itself (ECONNRESET for a closed connection too); Deno 2.9: no
 * code, only messages. Seen here on Node 20/22/24, Bun 1.4.5 and Deno 2.9.6.
 */
import { expect } from 'vitest';

export type FetchFailure = 'closed' | 'reset' | 'refused';

export const fetchRuntime: 'node' | 'bun' | 'deno' = 'Bun' in globalThis ? 'bun' : 'Deno' in globalThis ? 'deno' : 'node';

const EXPECTED: Record<typeof fetchRuntime, Record<FetchFailure, string | RegExp>> = {
  node: { closed: 'UND_ERR_SOCKET', reset: 'ECONNRESET', refused: 'ECONNREFUSED' },
  bun: { closed: 'ECONNRESET', reset: 'ECONNRESET', refused: 'ECONNREFUSED' },
  deno: { closed: /connection closed before message completed/, reset: /Connection reset by peer/, refused: /tcp connect error: Connection refused/ },
};

/** `error`, its cause, its cause's cause… as `{ code, message }`. */
export function causeChain(error: unknown): Array<{ code: unknown; message: unknown }> {
  const chain: Array<{ code: unknown; message: unknown }> = [];
  for (let e = error, depth = 0; e !== null && typeof e === 'object' && depth < 8; depth++) {
    const { code, message, cause } = e as { code?: unknown; message?: unknown; cause?: unknown };
    chain.push({ code, message });
    e = cause;
  }
  return chain;
}

/** Asserts that `error`'s chain holds what this runtime's fetch throws for a connection `kind`. */
export function expectFetchFailure(error: unknown, kind: FetchFailure): void {
  const want = EXPECTED[fetchRuntime][kind];
  expect(causeChain(error)).toContainEqual(
    typeof want === 'string' ? expect.objectContaining({ code: want }) : expect.objectContaining({ message: expect.stringMatching(want) }),
  );
}
