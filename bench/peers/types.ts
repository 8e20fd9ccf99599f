/** What server.ts hands each peer's glue: the one handler, and how the route should behave. */
import type { Framework, StoreKind } from '../shared.js';

export interface Body {
  readonly id: string;
  readonly ok: true;
}

export interface PeerContext {
  readonly framework: Framework;
  readonly store: StoreKind;
  /** Handler delay in ms; 0: the handler answers synchronously. */
  readonly delayMs: number;
  /** Whether a request without a key is refused (false for the no-key workload). */
  readonly required: boolean;
  /** The bench run's nonce, used in store prefixes so the server can delete what it stored. */
  readonly nonce: string;
  readonly redisUrl: string;
  /** The business logic every implementation runs: counts the execution (per key) and returns the body. */
  execute(key: string | undefined): Body;
}

export interface PeerServer {
  readonly port: number;
  close(): Promise<void>;
}

/** Thrown when a peer cannot serve a configuration at all; the report prints the reason as "n/a". */
export class NotApplicable extends Error {
  override readonly name = 'NotApplicable';
}

export const REPLAYED = 'idempotent-replayed';
