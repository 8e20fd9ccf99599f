// How a claimed request's record ends: completed with its answer (plain, or inside its request's
// transaction), released, or left in flight with its lease given back; and the previous scope's
// guard with it. `HeldClaim` is the base of `Execution` (execution.ts), which adds the state
// machine, the handler's context and the renewals, and calls these once it has finished.
import type { IdempotencyHttpError } from './errors.js';
import { ExecutionTimeoutHttpError, LeaseLostError, StoreUnavailableError } from './errors.js';
import type { Deadlines } from './deadlines.js';
import type { ResolvedOptions } from './options.js';
import type { Claim, RecordRef, StoreTransaction, StoredResponse } from './store.js';
import type { CompleteEvent, EventRequest, EventSink, LeaseLostEvent } from './events.js';
import type { EndedFrom, Ending } from './execution-state.js';

/** The request an execution serves, as events name it (the engine's `RequestFacts` fits). */
export interface RequestOrigin {
  readonly method: string;
  readonly path: string;
}

/**
 * A second claim an execution holds while it runs: the same key under the scope a deployment
 * replaced (`previousScope`), so that instances still on the old hook answer 409 meanwhile and
 * replay afterwards. Renewed with the execution's own claim, completed with its answer (outside
 * any transaction, after it) or released when it ends without one.
 */
export interface ExecutionGuard {
  readonly ref: RecordRef;
  readonly token: string;
}

/** The claim one request holds on its record (and its guard), and the ways that claim ends. */
export abstract class HeldClaim {
  protected readonly options: ResolvedOptions<never>;
  protected readonly ref: RecordRef;
  protected readonly token: string;
  protected readonly transaction: StoreTransaction<unknown> | undefined;
  protected readonly deadlines: Deadlines;
  /** The request's method and path, for events; its `performance.now()` at the claim when someone listens. */
  protected readonly origin: RequestOrigin | undefined;
  protected readonly claimedAt: number;
  protected readonly guard: ExecutionGuard | undefined;
  /** What the handler said of its ending through its context (orthogonal to `state`, see `Ending`). */
  protected ending: Ending = 'result';
  /**
   * The record holds committed progress: a recovery point an earlier owner left (a take-over), or
   * a checkpoint this execution committed outside its request's transaction. Such a record is never
   * released when the request ends without a result (discard, a rolled-back failure, a hijacked
   * reply): releasing deletes the recovery point, and the retry would run committed phases again.
   * Its lease is given back instead, so the retry takes it over at once and resumes (docs/model.md).
   */
  protected progress: boolean;
  /** How the request ended, for the `complete` event (set by `complete`). */
  protected outcome: CompleteEvent['outcome'] = 'stored';
  /** The answer this execution's own record now holds (stored, or committed), for the guard. */
  private kept: StoredResponse | undefined;

  protected constructor(
    options: ResolvedOptions<never>,
    ref: RecordRef,
    claim: Extract<Claim, { kind: 'acquired' }>,
    transaction: StoreTransaction<unknown> | undefined,
    deadlines: Deadlines,
    origin: RequestOrigin | undefined,
    guard: ExecutionGuard | undefined,
  ) {
    this.options = options;
    this.guard = guard;
    this.origin = origin;
    this.claimedAt = options.events === undefined ? 0 : performance.now();
    this.deadlines = deadlines;
    this.ref = ref;
    this.token = claim.token;
    this.transaction = transaction;
    this.progress = claim.resumeFrom !== undefined;
  }

  /** Stores (or not) the answer of an execution that has just finished, `from` the state it was in. */
  protected async complete(
    response: StoredResponse,
    threw: boolean,
    from: EndedFrom,
    events?: EventSink,
  ): Promise<IdempotencyHttpError | undefined> {
    const { onError } = this.options;
    const tx = this.transaction;
    if (tx !== undefined && from === 'overtime') {
      // Rolled back when the ceiling passed: nothing of this attempt can be committed now.
      await this.letGo();
      return new ExecutionTimeoutHttpError(this.options.maxExecutionMs, 'nothing');
    }
    const failed = threw || (tx !== undefined && response.status >= 500);
    if (this.ending === 'suspended') {
      this.outcome = 'suspended';
      if (tx) await tx.rollback().catch(onError);
      await this.yieldLease();
      return undefined;
    }
    if (this.ending === 'discarded' || (tx !== undefined && failed)) {
      if (tx) await tx.rollback().catch(onError);
      await this.letGo();
      return undefined;
    }
    if (tx === undefined) {
      // The effect has happened: whatever the store says now, the client gets the real answer.
      await this.storeResult(response, events);
      return undefined;
    }
    this.outcome = this.storedOutcome(response);
    try {
      if (from === 'lost') throw new LeaseLostError();
      await this.deadlines.bound(tx.complete(this.ref, this.token, response), 'complete');
      // A commit that times out may still land: the 503 then means "unknown, retry with the same
      // key", and the retry replays or, after the lease, takes over a record that never completed.
      await this.deadlines.bound(tx.commit(), 'commit');
      this.kept = response;
      return undefined;
    } catch (error) {
      await this.deadlines.bound(tx.rollback(), 'rollback').catch(() => {});
      onError(error);
      if (events !== undefined) this.completionFailed(events, error);
      if (error instanceof LeaseLostError) return new LeaseLostError(undefined, { cause: error });
      await this.releaseQuietly();
      return new StoreUnavailableError(undefined, { cause: error });
    }
  }

  /**
   * Completes the record with the handler's answer, outside a transaction; settles once the store
   * has answered, never rejecting: a store that did not take it is reported.
   */
  protected storeResult(response: StoredResponse, events: EventSink | undefined): Promise<void> {
    const { store, onError } = this.options;
    this.outcome = this.storedOutcome(response);
    return this.deadlines.bound(store.complete(this.ref, this.token, response), 'complete').then(
      () => {
        this.kept = response;
      },
      (error: unknown) => {
        onError(error);
        if (events !== undefined) this.completionFailed(events, error);
      },
    );
  }

  /** Each store applies its own size limit (fitResponse) when it writes the record. */
  private storedOutcome(response: StoredResponse): CompleteEvent['outcome'] {
    return (response.body?.byteLength ?? 0) > this.options.store.maxResponseBytes ? 'omitted' : 'stored';
  }

  /** The store did not take the completion: a lost lease (fenced out by the token), or a store error. */
  private completionFailed(events: EventSink, error: unknown): void {
    this.outcome = 'failed';
    if (error instanceof LeaseLostError) this.tellLeaseLost('complete');
    else if (events.wants('storeError')) events.emit('storeError', { operation: 'complete', error, request: this.who(events) });
  }

  protected tellLeaseLost(during: LeaseLostEvent['during']): void {
    const { events } = this.options;
    if (events?.wants('leaseLost')) {
      const { scope, key, method, path } = this.who(events);
      events.emit('leaseLost', { scope, key, method, path, during });
    }
  }

  /** The request as events name it. */
  protected who(events: EventSink): EventRequest {
    return events.request(this.ref.scope, this.ref.key, this.origin?.method ?? '', this.origin?.path ?? '');
  }

  /**
   * Ends the guard (`previousScope`'s record) as this execution ended: completed with the answer
   * its own record holds, so an instance on the old hook replays it; released otherwise, since
   * nothing is stored under either scope (a suspended record's progress stays under its own).
   */
  protected async closeGuard(): Promise<void> {
    const guard = this.guard!;
    const { store, onError } = this.options;
    const kept = this.kept;
    const closing = kept === undefined ? store.release(guard.ref, guard.token) : store.complete(guard.ref, guard.token, kept);
    await this.deadlines.bound(closing, kept === undefined ? 'release' : 'complete').catch((error: unknown) => {
      // A stale token on a release: nothing of ours is left there.
      if (!(kept === undefined && error instanceof LeaseLostError)) onError(error);
    });
  }

  /**
   * Ends a claim that produced no result: released, so a retry runs at once; or, when the record
   * holds committed progress, left in flight with its lease given back, so a retry resumes there.
   */
  protected async letGo(): Promise<void> {
    if (this.progress) {
      this.outcome = 'suspended';
      await this.yieldLease();
    } else {
      this.outcome = 'released';
      await this.releaseQuietly();
    }
  }

  /** A suspended request keeps its record and recovery points; the lease ends now, so a retry may resume. */
  protected async yieldLease(): Promise<void> {
    await this.deadlines.bound(this.options.store.renew(this.ref, this.token, 0), 'renew').catch(this.options.onError);
  }

  private async releaseQuietly(): Promise<void> {
    try {
      // Bounded like every store call on the answer's path: a store cut off mid-request (a pooled
      // connection whose bytes a partition holds back) must not hold the 503 back with it.
      await this.deadlines.bound(this.options.store.release(this.ref, this.token), 'release');
    } catch (error) {
      // A stale token means another request owns the key now: nothing of ours is left to release.
      if (!(error instanceof LeaseLostError)) this.options.onError(error);
    }
  }
}
