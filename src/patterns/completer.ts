/**
 * The completer (Stripe's name): drives abandoned in-flight records to completion without waiting
 * for their clients to retry. It lists records whose owner is gone, claims each one (a take-over
 * with the record's own fingerprint, so the claim decides against client retries and other
 * completers), resumes its phases from the recovery point and stores the response a retry replays.
 */
import { InvalidOptionError, LeaseLostError } from '../core/errors.js';
import type { FencedTransaction } from '../core/engine.js';
import type { AbandonedRecords, ClaimOptions, IdempotencyRecord, RecordRef, StoredResponse, TransactionalStore } from '../core/store.js';
import { canListAbandoned, isTransactionalStore } from '../core/store.js';
import { since } from '../core/events.js';
import type { Instance } from '../core/instance.js';
import { readInstance } from '../core/instance.js';
import { optionReader } from '../core/option-reader.js';
import type { CompleterEvents } from './completer-events.js';
import { CompleterTeller } from './completer-events.js';
import type { CompleterRunner, RoundControl } from './completer-runner.js';
import { completerRunner } from './completer-runner.js';
import type { PhaseHost, PhaseState, Phases } from './phases.js';

/** The answer a completed record replays, built from the last phase's output. */
export interface CompletedResponse {
  /** @default 200 */
  readonly status?: number;
  readonly headers?: Readonly<Record<string, string>>;
  /** A string or bytes go as they are; anything else as JSON (`content-type: application/json; charset=utf-8`). */
  readonly body?: unknown;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- definitions of any input and data
type AnyPhases = Phases<any, any, any, any>;

export interface CompleterOptions {
  /** A store with transactions and `listAbandoned` (SQLite, PostgreSQL, MySQL). Required. */
  readonly store: TransactionalStore & AbandonedRecords;
  /** The definitions it may resume; a record names its own (by `definePhases(name)`). Required. */
  readonly phases: AnyPhases | readonly AnyPhases[];
  /**
   * The response stored for a record the completer finished: what the route answers with the
   * same result, so a replay cannot tell who finished it.
   * @default (result) => ({ status: 200, body: result })
   */
  readonly response?: (result: unknown, record: RecordRef) => CompletedResponse;
  /** The completer's lease on each record it takes over; renewed every third while it runs. @default 30_000 */
  readonly leaseMs?: number;
  /** Records examined per `runOnce` (and per round of `start()`, unless it says otherwise). @default 100 */
  readonly batchSize?: number;
  /**
   * Told about each record that could not be completed (it stays in flight for the next round),
   * with `record` undefined for a round of `start()` that could not list records (the store is
   * down; the loop goes on) and for a listener of `events` that threw outside a record.
   * @default undefined (nothing is told)
   */
  readonly onError?: (error: unknown, record: RecordRef | undefined) => void;
  /**
   * Listeners told what the completer resumed, completed, gave up on (`failed`) and gave back at
   * `stop()`'s deadline (`yielded`), and how each round of `start()` went (`round`,
   * `roundFailed`). Events nobody listens to are never built.
   * @default {} (none)
   */
  readonly events?: CompleterEvents;
  /**
   * Events carry a stable hash of scope and key (`sha256:…`) instead of the key itself, for logs
   * that must not hold client-chosen identifiers. (`onError` and the report name records as they are.)
   * @default false
   */
  readonly redactKeys?: boolean;
  /**
   * This process's identity (`await startInstance({ store, name })`, on the same store): the
   * completer's claims carry its incarnation too, so a restart under the same name frees the
   * records this completer held when it crashed at once, not after `leaseMs`.
   * @default undefined
   */
  readonly instance?: Instance | undefined;
}

export interface CompleterReport {
  /** Records listed as abandoned. */
  readonly examined: number;
  /** Records this run completed. */
  readonly completed: RecordRef[];
  /**
   * Records left alone: no recovery point (the owner died before the input was recorded, or the
   * route uses no phases), an unknown definition, or a claim lost to a client retry or another completer.
   */
  readonly skipped: RecordRef[];
  /** Records whose phases failed; they stay in flight, resumable. */
  readonly failed: Array<{ readonly record: RecordRef; readonly error: unknown }>;
  /**
   * Records given back unfinished because `stop({ timeoutMs })`'s deadline passed (rounds of
   * `start()` only); resumable at once. Records a stopped round never reached are in no list.
   */
  readonly yielded: RecordRef[];
}

export interface Completer extends CompleterRunner {
  /** One batch: list, claim, resume, complete. Safe to run from several processes at once, and beside `start()`. */
  runOnce(): Promise<CompleterReport>;
}

export function completer(options: CompleterOptions): Completer {
  const c = resolveCompleter(options);
  const round = (limit: number, control?: RoundControl) => completeRound(c, limit, control);
  return {
    runOnce: () => round(c.batchSize),
    ...completerRunner({ batchSize: c.batchSize, round, teller: c.teller, report: c.report }),
  };
}

/** What a completer needs, its options read and checked once. */
interface ResolvedCompleter {
  readonly store: TransactionalStore & AbandonedRecords;
  readonly byName: ReadonlyMap<string, AnyPhases>;
  readonly leaseMs: number;
  readonly batchSize: number;
  /** The claim of a record it takes over: its own lease, and the instance's incarnation. */
  readonly claimOptions: ClaimOptions;
  readonly respond: (result: unknown, record: RecordRef) => CompletedResponse;
  /** `onError`, guarded: a hook that throws has nowhere else to go, and must not end a round or the loop. */
  readonly report: (error: unknown, record: RecordRef | undefined) => void;
  readonly teller: CompleterTeller;
}

function resolveCompleter(options: CompleterOptions): ResolvedCompleter {
  const read = optionReader('completer()', options);
  const store = read.value('store');
  if (!store || !isTransactionalStore(store) || !canListAbandoned(store)) {
    throw new InvalidOptionError('store', 'expected a store with transactions and listAbandoned (sqlite, postgres, mysql)');
  }
  const phases = read.value('phases');
  const list = Array.isArray(phases) ? (phases as readonly AnyPhases[]) : [phases as AnyPhases];
  const byName = new Map<string, AnyPhases>();
  for (const definition of list) {
    if (!definition || typeof definition.run !== 'function') throw new InvalidOptionError('phases', 'expected definitions from definePhases()');
    if (byName.has(definition.name)) throw new InvalidOptionError('phases', `two definitions are named "${definition.name}"`);
    byName.set(definition.name, definition);
  }
  if (byName.size === 0) throw new InvalidOptionError('phases', 'expected at least one definition');
  const leaseMs = read.duration('leaseMs', { default: 30_000, min: 1 });
  const batchSize = read.integer('batchSize', { default: 100, min: 1 });
  const respond = read.function('response', { default: (result: unknown) => ({ status: 200, body: result }) });
  const onError = read.function('onError');
  const listeners = read.object('events');
  const events: CompleterEvents = {
    resumed: listeners?.function('resumed'),
    completed: listeners?.function('completed'),
    failed: listeners?.function('failed'),
    yielded: listeners?.function('yielded'),
    round: listeners?.function('round'),
    roundFailed: listeners?.function('roundFailed'),
  };
  listeners?.done();
  const redactKeys = read.boolean('redactKeys', { default: false });
  const instance = readInstance(read.value('instance'), store, (message) => read.fail('instance', message));
  read.done();
  const report = (error: unknown, record: RecordRef | undefined): void => {
    try {
      onError?.(error, record);
    } catch {
      // Deliberately dropped: see ResolvedCompleter.report.
    }
  };
  // windowMs only matters if a record vanished since the listing: then the claim creates a fresh
  // one, which is released at once (completeRecord).
  const claimOptions: ClaimOptions = instance === undefined ? { leaseMs, windowMs: leaseMs } : { leaseMs, windowMs: leaseMs, incarnation: instance.incarnation };
  return { store, byName, leaseMs, batchSize, claimOptions, respond, report, teller: new CompleterTeller(events, redactKeys, report) };
}

/** The definition a record's recovery data names, or undefined when it is none of ours. */
function definitionOf(c: ResolvedCompleter, point: string | undefined, data: unknown): AnyPhases | undefined {
  if (point === undefined || !data || typeof data !== 'object') return undefined;
  const name = (data as Partial<PhaseState>).phases;
  return typeof name === 'string' ? c.byName.get(name) : undefined;
}

/** One round of at most `limit` records; with a loop's `control`, it ends early once stopped. */
async function completeRound(c: ResolvedCompleter, limit: number, control?: RoundControl): Promise<CompleterReport> {
  const records = await c.store.listAbandoned(limit);
  const result = { examined: records.length, completed: [] as RecordRef[], skipped: [] as RecordRef[], failed: [] as CompleterReport['failed'], yielded: [] as RecordRef[] };
  for (const record of records) {
    if (control?.stopped) break;
    const ref = { scope: record.scope, key: record.key };
    try {
      result[await completeRecord(c, record, control)].push(ref);
    } catch (error) {
      if (!control?.closed) c.report(error, ref);
      result.failed.push({ record: ref, error });
    }
  }
  return result;
}

/**
 * One record: claim, resume, complete. Throws when it failed (after telling `failed`); with a
 * loop's `control`, registers how to give the record back while it holds it.
 */
async function completeRecord(c: ResolvedCompleter, record: IdempotencyRecord, control?: RoundControl): Promise<'completed' | 'skipped' | 'yielded'> {
  const { store, leaseMs, report } = c;
  const ref: RecordRef = { scope: record.scope, key: record.key };
  const tell: CompleterTeller['record'] = (name, at, facts) => {
    if (!control?.closed) c.teller.record(name, at, facts);
  };
  if (!definitionOf(c, record.recoveryPoint, record.recoveryData)) return 'skipped';
  const claimedAt = performance.now();
  let claim: Awaited<ReturnType<typeof store.claim>>;
  try {
    claim = await store.claim(ref, record.fingerprint, c.claimOptions);
  } catch (error) {
    tell('failed', ref, () => ({ phases: undefined, resumeFrom: undefined, durationMs: since(claimedAt), error }));
    throw error;
  }
  if (claim.kind !== 'acquired') return 'skipped';
  const { token } = claim;
  const definition = claim.takeover ? definitionOf(c, claim.resumeFrom, claim.recoveryData) : undefined;
  if (!definition) {
    try {
      if (claim.takeover) await store.renew(ref, token, 0); // not ours after all: give the lease back
      else await store.release(ref, token).catch(() => {});
    } catch (error) {
      tell('failed', ref, () => ({ phases: undefined, resumeFrom: undefined, durationMs: since(claimedAt), error }));
      throw error;
    }
    return 'skipped';
  }
  const phases = definition.name;
  const { resumeFrom } = claim;
  let lost = false;
  // Set once the record was given back: nothing more is written under this claim.
  let yielded = false;
  const renewal = setInterval(() => {
    store.renew(ref, token, leaseMs).then((ok) => void (lost ||= !ok), () => {});
  }, Math.max(1, Math.floor(leaseMs / 3)));
  renewal.unref?.();
  const giveBack = async (): Promise<void> => {
    if (yielded) return;
    yielded = true;
    clearInterval(renewal);
    await store.renew(ref, token, 0).catch((error: unknown) => report(error, ref));
    tell('yielded', ref, () => ({ phases, resumeFrom, durationMs: since(claimedAt) }));
  };
  if (control) {
    control.giveBack = giveBack;
    // Claimed after stop()'s deadline passed: give it back before running anything.
    if (control.yielding) {
      await giveBack();
      control.giveBack = undefined;
      return 'yielded';
    }
  }
  const refuseAfterYield = () => {
    if (lost || yielded) throw new LeaseLostError(yielded ? 'The completer gave this record back at stop()' : undefined);
  };
  const host = phaseHost(store, ref, token, claim, refuseAfterYield);
  tell('resumed', ref, () => ({ phases, resumeFrom, durationMs: 0 }));
  try {
    const result = await definition.run(host);
    // Given back meanwhile: the record is another owner's to finish (its phases committed are kept).
    if (yielded) return 'yielded';
    const stored = toStored(c.respond(result, ref));
    await store.complete(ref, token, stored);
    tell('completed', ref, () => ({ phases, resumeFrom, durationMs: since(claimedAt), status: stored.status }));
    return 'completed';
  } catch (error) {
    if (yielded) return 'yielded';
    // The record keeps its recovery points; the lease ends now, so the next round (or a retry) resumes.
    await store.renew(ref, token, 0).catch(() => {});
    tell('failed', ref, () => ({ phases, resumeFrom, durationMs: since(claimedAt), error }));
    throw error;
  } finally {
    clearInterval(renewal);
    if (control?.giveBack === giveBack) control.giveBack = undefined;
  }
}

/** What the phases see of a record the completer took over: its checkpoints and transactions, refused once the claim is gone. */
function phaseHost(
  store: TransactionalStore,
  ref: RecordRef,
  token: string,
  claim: { readonly resumeFrom?: string | undefined; readonly recoveryData?: unknown },
  refuseAfterYield: () => void,
): PhaseHost {
  return {
    scope: ref.scope,
    key: ref.key,
    resumeFrom: claim.resumeFrom,
    recoveryData: claim.recoveryData,
    checkpoint: async (point, data) => {
      refuseAfterYield();
      await store.checkpoint(ref, token, point, data);
    },
    async beginTransaction(): Promise<FencedTransaction<unknown>> {
      refuseAfterYield();
      const tx = await store.beginTransaction();
      return {
        tx: tx.tx,
        checkpoint: async (point, data) => {
          refuseAfterYield();
          await tx.checkpoint(ref, token, point, data);
        },
        commit: () => tx.commit(),
        rollback: () => tx.rollback(),
      };
    },
  };
}

function toStored(response: CompletedResponse): StoredResponse {
  const status = response.status ?? 200;
  if (!Number.isInteger(status) || status < 200 || status > 599) throw new InvalidOptionError('response', `status ${String(status)} is not a final HTTP status`);
  const headers = Object.entries(response.headers ?? {}).map(([name, value]) => [name.toLowerCase(), value] as const);
  const { body } = response;
  let bytes: Uint8Array;
  if (body instanceof Uint8Array) bytes = body;
  else if (typeof body === 'string') bytes = new TextEncoder().encode(body);
  else if (body === undefined) bytes = new Uint8Array(0);
  else {
    bytes = new TextEncoder().encode(JSON.stringify(body));
    if (!headers.some(([name]) => name === 'content-type')) headers.push(['content-type', 'application/json; charset=utf-8']);
  }
  return { status, headers, body: bytes, bodyOmitted: false };
}
