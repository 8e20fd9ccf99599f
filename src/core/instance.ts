/**
 * Instance identity: a restarted instance takes back its crashed predecessor's in-flight work at
 * once, instead of every key waiting out its lease.
 *
 * An instance is a stable name per deployment slot (`checkout-1`); each process start is a new
 * incarnation, 16 random hex characters that begin every owner token it claims with
 * (`newOwnerToken`). The name is registered in the store itself, as a record in idemkit's reserved
 * scope that the process claims at start and renews on a short lease (a heartbeat): one record per
 * name, one holder at a time, decided by the same atomic claim as any key. So:
 *
 * - A second live process with the same name cannot register while the first renews: its start
 *   waits out one registration lease, finds it renewed, and refuses (`InstanceInUseError`). It
 *   never learns, or ends, the first one's leases.
 * - A process that died stops renewing; its successor's claim takes the registration over once
 *   that lease ends (seconds, not the 30 s of a request's lease), reads the predecessor's
 *   incarnation from the record's recovery data, and ends the leases of the records it claimed
 *   (`IncarnationLeases.endLeasesOf`): a retry or a completer takes each over at once.
 * - A clean `stop()` deletes the registration: the next start has no predecessor to reclaim from,
 *   so work that was still running when `stop()` was called is never cut short.
 *
 * A process that cannot reach the store for a whole registration lease is, to its successor, gone,
 * exactly as a request whose lease ran out: its late completions are refused by the owner token.
 */
import { InstanceInUseError, InvalidOptionError } from './errors.js';
import type { IdempotencyLogger } from './logger.js';
import { consoleLogger } from './logger.js';
import { internalScope } from './namespaces.js';
import { optionReader } from './option-reader.js';
import type { IdempotencyStore, RecordRef } from './store.js';
import { canEndLeasesOf } from './store.js';
import { isIncarnation, newIncarnation } from './token.js';

export interface InstanceOptions {
  /**
   * The store the instance's requests claim their keys in (the middleware's and the completer's
   * store), with `endLeasesOf`: memory, SQLite, PostgreSQL, MySQL. Required.
   */
  readonly store: IdempotencyStore;
  /**
   * This deployment slot's name, the same across restarts and different for every process that
   * runs at the same time (a StatefulSet pod's name, a systemd unit's instance). Required;
   * 1–200 printable characters.
   */
  readonly name: string;
  /**
   * How long the registration is trusted without a heartbeat (renewed every third): a crashed
   * instance's successor takes its work back at most this long after the crash.
   * @default 5_000
   */
  readonly leaseMs?: number;
  /**
   * How long `startInstance` waits for a registration held by another process to run out before
   * it refuses (`InstanceInUseError`): a dead predecessor's runs out within `leaseMs`, a live
   * process renews it.
   * @default 2 × leaseMs
   */
  readonly waitMs?: number;
  /** Where a lost registration is reported. @default console */
  readonly logger?: IdempotencyLogger;
}

/** A registered instance; pass it to the middleware and the completer as `instance`. */
export interface Instance {
  readonly name: string;
  /** This process's incarnation: 16 hex characters that begin every owner token it claims with. */
  readonly incarnation: string;
  /** How many in-flight records of the previous incarnation had their leases ended at start. */
  readonly reclaimed: number;
  /**
   * Ends the heartbeat and deletes the registration. Call it after the server has drained (its
   * `close()` resolved): a successor then starts at once and takes nothing back.
   */
  stop(): Promise<void>;
}

/** What the registration record keeps (its recovery data): the incarnation holding it, and the one before. */
interface Registration {
  readonly incarnation: string;
  readonly previous?: string | undefined;
}

/** The fingerprint of every registration record: a claim of the same name is the same request. */
const REGISTRATION = 'instance-registration';
/** How long a registration is remembered after its last holder stopped renewing it. */
const REMEMBERED_MS = 365 * 24 * 60 * 60 * 1000;
/** The recovery point a registration's data is kept under. */
const POINT = 'registered';

/**
 * Registers `name` in the store for this process and takes back what its crashed predecessor left
 * in flight. Resolves once registered; rejects with `InstanceInUseError` when another live process
 * holds the name.
 */
export async function startInstance(options: InstanceOptions): Promise<Instance> {
  const read = optionReader('startInstance()', options);
  const store = read.value('store');
  if (!store || typeof store.claim !== 'function') read.fail('store', 'expected an idempotency store');
  if (!canEndLeasesOf(store)) throw new InvalidOptionError('store', `the ${store.name} store cannot end an incarnation's leases (endLeasesOf); instance identities work with the memory, SQLite, PostgreSQL and MySQL stores`);
  const name = read.value('name');
  if (typeof name !== 'string' || name.length === 0 || name.length > 200 || !/^[\x20-\x7e]+$/.test(name)) {
    read.fail('name', 'expected 1 to 200 printable ASCII characters, the same across restarts of this slot');
  }
  const leaseMs = read.duration('leaseMs', { default: 5_000, min: 100 });
  const waitMs = read.duration('waitMs', { default: 2 * leaseMs, min: 0 });
  const logger = read.value('logger') ?? consoleLogger;
  read.done();

  const ref: RecordRef = { scope: internalScope('instance', 'registry'), key: name };
  const incarnation = newIncarnation();
  const token = await register(store, ref, leaseMs, waitMs);

  const { taken, previous } = token;
  // Kept before anything is taken back: a crash from here on leaves a successor both names.
  await store.checkpoint(ref, taken, POINT, { incarnation, previous: previous?.incarnation } satisfies Registration);
  let reclaimed = 0;
  for (const gone of [previous?.incarnation, previous?.previous]) {
    if (isIncarnation(gone)) reclaimed += await store.endLeasesOf(gone);
  }

  let lost = false;
  const heartbeat = setInterval(() => {
    store.renew(ref, taken, leaseMs).then(
      (ok) => {
        if (ok || lost) return;
        lost = true;
        clearInterval(heartbeat);
        logger.error(
          `idemkit: instance ${JSON.stringify(name)} lost its registration: another process registered the same name (two processes share it, or this one could not renew for ${leaseMs} ms). Requests in flight here keep their own leases; give every process its own name.`,
        );
      },
      (error: unknown) => logger.warn(`idemkit: instance ${JSON.stringify(name)} could not renew its registration; retrying`, error),
    );
  }, Math.max(1, Math.floor(leaseMs / 3)));
  heartbeat.unref?.();

  const instance: Instance = {
    name,
    incarnation,
    reclaimed,
    async stop() {
      clearInterval(heartbeat);
      if (lost) return;
      lost = true;
      await store.release(ref, taken);
    },
  };
  registeredOn.set(instance, store);
  return instance;
}

/** The store each instance is registered on: its incarnation means something only there. */
const registeredOn = new WeakMap<Instance, IdempotencyStore>();

/**
 * The `instance` option of a middleware or completer on `store`: undefined, or an instance that
 * `startInstance` registered on that same store. `fail` throws the caller's option error.
 */
export function readInstance(value: unknown, store: IdempotencyStore, fail: (message: string) => never): Instance | undefined {
  if (value === undefined) return undefined;
  const on = registeredOn.get(value as Instance);
  if (on === undefined) return fail('expected what `await startInstance({ store, name })` returns');
  if (on !== store) return fail(`instance ${JSON.stringify((value as Instance).name)} is registered on another store than this one: its incarnation would end nothing here`);
  return value as Instance;
}

/** Claims the registration, waiting out a holder's lease up to `waitMs`; the token and the predecessor's registration. */
async function register(
  store: IdempotencyStore,
  ref: RecordRef,
  leaseMs: number,
  waitMs: number,
): Promise<{ readonly taken: string; readonly previous: Registration | undefined }> {
  let waited = 0;
  for (;;) {
    const claim = await store.claim(ref, REGISTRATION, { leaseMs, windowMs: REMEMBERED_MS });
    if (claim.kind === 'acquired') {
      const data = claim.takeover && claim.resumeFrom === POINT ? (claim.recoveryData as Partial<Registration> | undefined) : undefined;
      const previous = data && isIncarnation(data.incarnation) ? { incarnation: data.incarnation, previous: isIncarnation(data.previous) ? data.previous : undefined } : undefined;
      return { taken: claim.token, previous };
    }
    if (claim.kind !== 'in_flight') {
      // A registration record is never completed and always has the same fingerprint.
      throw new InvalidOptionError('name', `the store holds a record under this instance's registration that is not one (${claim.kind})`);
    }
    if (waited >= waitMs) throw new InstanceInUseError(ref.key, waited);
    // A dead holder's lease ends within claim.retryAfterMs; a live one's is renewed meanwhile.
    const pause = Math.min(Math.max(1, claim.retryAfterMs + 1), waitMs - waited + 1);
    await new Promise((resolve) => setTimeout(resolve, pause));
    waited += pause;
  }
}
