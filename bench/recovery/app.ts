/**
 * What the driver hands each implementation's app file (app-idemkit.ts, app-dbos.ts): the worker
 * process (worker.ts) imports the app named by the variant and calls its `start(config)`. Kept out
 * of the app files so their line counts hold only what a user of each library writes.
 */

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
  /** The variant's options (variants.ts). */
  readonly options: Options;
}

/** The options of an idemkit variant (variants.ts). */
export interface IdemkitOptions {
  /** The requests' and the completer's lease. */
  readonly leaseMs: number;
  /**
   * Instance-aware take-over: the worker registers under this name (`startInstance`) and passes
   * the instance to the middleware, so its restarted successor frees the keys its predecessor left
   * in flight instead of waiting out their leases.
   */
  readonly instance?: string;
}

/** An app file's one export. Resolves once it serves `POST /orders` on `config.port`. */
export type StartApp<Options = Record<string, unknown>> = (config: AppConfig<Options>) => Promise<void>;
