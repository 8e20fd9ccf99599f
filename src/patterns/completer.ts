/**
 * The completer (Stripe's name): drives abandoned in-flight records to completion without waiting
 * for their clients to retry. It lists records whose owner is gone, claims each one (a take-over
 * with the record's own fingerprint, so the claim decides against client retries and other
 * completers), resumes its phases from the recovery point and stores the response a retry replays.
 */
import { InvalidOptionError, LeaseLostError } from '../core/errors.js';
import type { FencedTransaction } from '../core/engine.js';
import type { AbandonedRecords, IdempotencyRecord, RecordRef, StoredResponse, TransactionalStore } from '../core/store.js';
import { canListAbandoned, isTransactionalStore } from '../core/store.js';
import { optionReader } from '../core/option-reader.js';
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
  /** Records examined per `runOnce`. @default 100 */
  readonly batchSize?: number;
  /** Told about each record that could not be completed (it stays in flight for the next round). */
  readonly onError?: (error: unknown, record: RecordRef) => void;
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
}

export interface Completer {
  /** One batch: list, claim, resume, complete. Safe to run from several processes at once. */
  runOnce(): Promise<CompleterReport>;
}

export function completer(options: CompleterOptions): Completer {
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
  const onError = read.value('onError') ?? (() => {});
  read.done();

  /** The definition a record's recovery data names, or undefined when it is none of ours. */
  const definitionOf = (point: string | undefined, data: unknown): AnyPhases | undefined => {
    if (point === undefined || !data || typeof data !== 'object') return undefined;
    const name = (data as Partial<PhaseState>).phases;
    return typeof name === 'string' ? byName.get(name) : undefined;
  };

  async function completeOne(record: IdempotencyRecord): Promise<'completed' | 'skipped'> {
    const ref: RecordRef = { scope: record.scope, key: record.key };
    if (!definitionOf(record.recoveryPoint, record.recoveryData)) return 'skipped';
    // windowMs only matters if the record vanished since the listing: then the claim creates a
    // fresh one, which is released at once below.
    const claim = await store.claim(ref, record.fingerprint, { leaseMs, windowMs: leaseMs });
    if (claim.kind !== 'acquired') return 'skipped';
    const { token } = claim;
    const definition = claim.takeover ? definitionOf(claim.resumeFrom, claim.recoveryData) : undefined;
    if (!definition) {
      if (claim.takeover) await store.renew(ref, token, 0); // not ours after all: give the lease back
      else await store.release(ref, token).catch(() => {});
      return 'skipped';
    }
    let lost = false;
    const renewal = setInterval(() => {
      store.renew(ref, token, leaseMs).then((ok) => void (lost ||= !ok), () => {});
    }, Math.max(1, Math.floor(leaseMs / 3)));
    renewal.unref?.();
    const host: PhaseHost = {
      scope: ref.scope,
      key: ref.key,
      resumeFrom: claim.resumeFrom,
      recoveryData: claim.recoveryData,
      checkpoint: (point, data) => store.checkpoint(ref, token, point, data),
      async beginTransaction(): Promise<FencedTransaction<unknown>> {
        if (lost) throw new LeaseLostError();
        const tx = await store.beginTransaction();
        return {
          tx: tx.tx,
          checkpoint: (point, data) => tx.checkpoint(ref, token, point, data),
          commit: () => tx.commit(),
          rollback: () => tx.rollback(),
        };
      },
    };
    try {
      const result = await definition.run(host);
      await store.complete(ref, token, toStored(respond(result, ref)));
      return 'completed';
    } catch (error) {
      // The record keeps its recovery points; the lease ends now, so the next round (or a retry) resumes.
      await store.renew(ref, token, 0).catch(() => {});
      throw error;
    } finally {
      clearInterval(renewal);
    }
  }

  return {
    async runOnce(): Promise<CompleterReport> {
      const records = await store.listAbandoned(batchSize);
      const report = { examined: records.length, completed: [] as RecordRef[], skipped: [] as RecordRef[], failed: [] as CompleterReport['failed'] };
      for (const record of records) {
        const ref = { scope: record.scope, key: record.key };
        try {
          report[await completeOne(record)].push(ref);
        } catch (error) {
          onError(error, ref);
          report.failed.push({ record: ref, error });
        }
      }
      return report;
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
