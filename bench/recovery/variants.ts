/**
 * The implementations and settings the bench compares: each variant is one entry, its `options`
 * passed to its app's `start`. A variant with `available` runs only when that check finds what it
 * needs; otherwise the bench prints its `unavailable` line and skips it.
 */
import type { IdemkitOptions } from './app.js';

export interface Variant {
  /** For BENCH_VARIANTS. */
  readonly id: string;
  /** The table's first column. */
  readonly label: string;
  readonly app: 'idemkit' | 'dbos';
  readonly options: object;
  /** Resolves to undefined when the variant can run, or to why not. */
  readonly available?: () => Promise<string | undefined>;
  /** What the bench prints when `available` finds it cannot run. */
  readonly unavailable?: string;
}

/**
 * Instance-aware take-over: the worker registers a stable name for its slot (`startInstance`,
 * DESIGN.md §2: an identity no live process can share), so its restarted successor, once the dead
 * one's registration lapses (5 s), ends the leases its predecessor left, and client retries and the
 * completer take those orders over at once instead of after the 30 s lease.
 */
const INSTANCE_AWARE: IdemkitOptions = { leaseMs: 30_000, instance: 'recovery-bench-worker' };

export const VARIANTS: readonly Variant[] = [
  { id: 'idemkit-30s', label: 'idemkit, default lease (30 s)', app: 'idemkit', options: { leaseMs: 30_000 } satisfies IdemkitOptions },
  { id: 'idemkit-2s', label: 'idemkit, short lease (2 s)', app: 'idemkit', options: { leaseMs: 2_000 } satisfies IdemkitOptions },
  {
    id: 'idemkit-instance',
    label: 'idemkit, instance-aware take-over (30 s lease)',
    app: 'idemkit',
    options: INSTANCE_AWARE,
  },
  { id: 'dbos', label: 'DBOS Transact 4.27.6 (knex datasource)', app: 'dbos', options: {} },
];
