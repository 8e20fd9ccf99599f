/**
 * What the driver hands each implementation's app file (app-idemkit.ts, app-dbos.ts): the worker
 * process (worker.ts) imports the app named by the variant and calls its `start(config)`. Kept out
 * of the app files so their line counts hold only what a user of each library writes.
 */
import type { IdempotencyOptions } from 'idemkit';

/** One order of the seeds' two-phase payment. The client sends `orderId` as its Idempotency-Key. */
export interface Order {
  readonly orderId: string;
  readonly amount: number;
}

/** What a finished order answers (201), first time or replayed. */
export interface OrderAnswer {
  readonly orderId: string;
  readonly chargeId: string;
}

export interface AppConfig<Options = Record<string, unknown>> {
  /** The port to serve on: the same across a restart, as a client's retries go to one address. */
  readonly port: number;
  readonly databaseUrl: string;
  /** The foreign payment service (foreign.ts), in the driver process so a kill cannot reset its counts. */
  readonly foreignUrl: string;
  /** The business table (db.ts creates it): order_id, amount, charge_id, charged, charged_at. */
  readonly ordersTable: string;
  /** The bench's own name for the implementation's state: idemkit's record table, DBOS's system schema. */
  readonly stateName: string;
  /** The variant's options (options.ts). */
  readonly options: Options;
}

/** The options of an idemkit variant (variants.ts). */
export interface IdemkitOptions {
  /** The requests' and the completer's lease. */
  readonly leaseMs: number;
  /**
   * Instance-aware take-over: the worker registers under this name (`startInstance`), so its
   * restarted successor ends the leases its predecessor left instead of waiting them out.
   */
  readonly instance?: string;
}

/**
 * idemkit's `startInstance`, looked up rather than imported while idemkit may not export it yet
 * (variants.ts checks for it; app-idemkit.ts calls it only when a variant names an instance).
 */
export type StartInstance = (options: { readonly store: object; readonly name: string }) => Promise<InstanceOption>;

/** The middleware's `instance` option, typed as idemkit types it (never while it has none). */
type InstanceOption = NonNullable<IdempotencyOptions[Extract<'instance', keyof IdempotencyOptions>]>;

export function startInstanceOf(idemkit: object): StartInstance | undefined {
  const found = (idemkit as { startInstance?: unknown }).startInstance;
  return typeof found === 'function' ? (found as StartInstance) : undefined;
}

/** An app file's one export. Resolves once it serves `POST /orders` on `config.port`. */
export type StartApp<Options = Record<string, unknown>> = (config: AppConfig<Options>) => Promise<void>;
