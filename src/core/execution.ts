import type { IdempotencyHttpError } from './errors.js';
import {
  ExecutionEndedError,
  ExecutionTimeoutHttpError,
  LeaseLostError,
  NotTransactionalError,
  StoreUnavailableError,
  TransactionalModeError,
  TransactionEndedError,
} from './errors.js';
import type { Deadlines } from './deadlines.js';
import type { LeaseKeeper } from './lease-keeper.js';
import type { ResolvedOptions } from './options.js';
import type { Claim, RecordRef, StoreTransaction, StoredResponse, TxOf } from './store.js';
import { isTransactionalStore } from './store.js';
import type { ResponseHeaders } from './response.js';
import { toStoredResponse, toStoredResponseFromRecord } from './response.js';
import { fenceHandle } from './tx-fence.js';
import type { CompleteEvent, EventRequest, EventSink, LeaseLostEvent } from './events.js';
import { redactedKey, since } from './events.js';

/** The request an execution serves, as events name it (the engine's `RequestFacts` fits). */
export interface RequestOrigin {
  readonly method: string;
  readonly path: string;
}

/** Tells, at each lease-keeper tick, whether the answer went out without `finish` (a hijacked reply). */
export type AbandonedCheck<Target> = (target: Target) => boolean;

/**
 * What the handler sees of its idempotency context. `Tx` is `ctx.tx`'s type (the store's
 * transaction object in transactional mode, `undefined` outside it); `StoreTx` is what
 * `beginTransaction` hands out. Adapters derive both from the store they are given (`ContextFor`).
 */
export interface IdempotencyContext<Tx = unknown, StoreTx = Tx> {
  readonly key: string;
  readonly scope: string;
  /** True when an earlier owner's lease ran out and this request took over. */
  readonly takeover: boolean;
  /** The last recovery point an earlier owner reached; resume from there. */
  readonly resumeFrom: string | undefined;
  readonly recoveryData: unknown;
  /**
   * The store transaction, in transactional mode: the driver's own object (a pg client, a mysql2
   * connection, a better-sqlite3 Database) behind a fence that refuses every call once the request
   * has ended (answered, rolled back, or past `maxExecutionMs`) with `TransactionEndedError`.
   */
  readonly tx: Tx;
  /** Records a recovery point (fenced by this request's owner token). */
  checkpoint(point: string, data?: unknown): Promise<void>;
  /**
   * Declares that nothing happened (validation failed inside the handler): the claim is released
   * and the response is not stored, so the key can be used again.
   */
  discard(): void;
  /**
   * Opens a store transaction of this request's own, for one recovery phase (idemkit/patterns
   * `definePhases`): its `checkpoint` is fenced by the owner token and commits with the writes.
   * Refused in transactional mode (the whole request is already one transaction, which a phase
   * commit would break) and on a store without transactions.
   */
  beginTransaction(): Promise<FencedTransaction<StoreTx>>;
  /**
   * Ends the request without a stored result but keeps its recovery points: the response is sent
   * and not stored, the record stays in flight and its lease is given up at once, so a retry (or a
   * completer) resumes from the last recovery point. Releasing instead would forget committed phases.
   */
  suspend(): void;
}

/**
 * `ctx.tx`'s type for a store and a `transactional` setting: the store's transaction object when
 * `transactional: true`, `undefined` when it is off (or left out), either when it is only known
 * to be a boolean.
 */
export type HandlerTx<Store, Transactional extends boolean> = [Transactional] extends [true]
  ? TxOf<Store>
  : [Transactional] extends [false]
    ? undefined
    : TxOf<Store> | undefined;

/** The idempotency context an adapter given `store` and `transactional` hands its handlers. */
export type ContextFor<Store, Transactional extends boolean> = IdempotencyContext<HandlerTx<Store, Transactional>, TxOf<Store>>;

/** A store transaction bound to one claimed record: `checkpoint` is fenced by its owner token. */
export interface FencedTransaction<Tx = unknown> {
  readonly tx: Tx;
  /** Records a recovery point inside the transaction; throws `LeaseLostError` when the token is stale. */
  checkpoint(point: string, data?: unknown): Promise<void>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
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

/**
 * Where an execution's claim stands (`Execution.state`). The spin model (spec/record.pml) has the
 * same moments: `running` is an attempt its `held[me]` holds, `lost` its `lost` (a renewal found
 * the token replaced), `overtime` a freeze that never thaws (`paused` for good), `finished` an
 * attempt past its completion or release, on its way to `reply:` (docs/model.md).
 *
 *   running  -> overtime   expire: a keeper tick at maxExecutionMs; renewal stops, a transaction rolls back
 *   running  -> lost       a renewal the store refused; renewal stops
 *   lost     -> overtime   expire again; the keeper no longer ticks a lost lease, so only a direct renew() gets here
 *   (any but finished) -> finished   finish or abort, whichever comes first
 *
 * Refused, the state unchanged: overtime -> lost (the ceiling's answer already decides the
 * finish; the leaseLost event is still told), and every move out of finished (a second finish or
 * abort, a renewal answered late, expire). `finish` decides on the state the execution ended from.
 */
type ExecutionState = 'running' | 'overtime' | 'lost' | 'finished';

/**
 * How the handler asked its request to end (`Execution.ending`): with its answer, or through its
 * context with nothing stored (`ctx.discard()`) or suspended (`ctx.suspend()`). Not a state of the
 * claim but a dimension of its own: the handler may say it in any state, past the ceiling and
 * even while an abort rolls back (which reads it afterwards), and neither outweighs the other
 * everywhere (at the finish overtime wins in transactional mode, the ending outside it and in an
 * abort). result -> discarded -> suspended, result -> suspended; a discard after a suspend is
 * refused, since suspended wins whatever the order.
 */
type Ending = 'result' | 'discarded' | 'suspended';

/** One claimed request while its handler runs: lease renewal, checkpoints, and the fenced finish. */
export class Execution {
  readonly context: IdempotencyContext;
  private readonly options: ResolvedOptions<never>;
  private readonly ref: RecordRef;
  private readonly token: string;
  private readonly transaction: StoreTransaction<unknown> | undefined;
  private readonly keeper: LeaseKeeper;
  private readonly deadlines: Deadlines;
  /** What the adapter watches (its response), and how; see `watch`. */
  private watched: object | undefined;
  private abandoned: AbandonedCheck<never> | undefined;
  private readonly startedAt = Date.now();
  /** The request's method and path, for events; its `performance.now()` at the claim when someone listens. */
  private readonly origin: RequestOrigin | undefined;
  private readonly claimedAt: number;
  /** Closed when the execution ends (or runs past `maxExecutionMs`): `ctx.tx` refuses use from then on. */
  private readonly fence: { closedBecause: string | undefined } = { closedBecause: undefined };
  /** Where the claim stands: overtime is past `maxExecutionMs`, no longer renewed, in transactional mode rolled back. */
  private state: ExecutionState = 'running';
  /** What the handler said of its ending through its context (orthogonal to `state`, see `Ending`). */
  private ending: Ending = 'result';
  /**
   * The record holds committed progress: a recovery point an earlier owner left (a take-over), or
   * a checkpoint this execution committed outside its request's transaction. Such a record is never
   * released when the request ends without a result (discard, a rolled-back failure, a hijacked
   * reply): releasing deletes the recovery point, and the retry would run committed phases again.
   * Its lease is given back instead, so the retry takes it over at once and resumes (docs/model.md).
   */
  private progress: boolean;
  private readonly guard: ExecutionGuard | undefined;
  /** The answer this execution's own record now holds (stored, or committed), for the guard. */
  private kept: StoredResponse | undefined;
  /** When the renewal still waiting for the store was sent (`Date.now()`); undefined when none waits. */
  private renewingSince: number | undefined;

  constructor(
    options: ResolvedOptions<never>,
    ref: RecordRef,
    claim: Extract<Claim, { kind: 'acquired' }>,
    transaction: StoreTransaction<unknown> | undefined,
    keeper: LeaseKeeper,
    deadlines: Deadlines,
    origin?: RequestOrigin,
    guard?: ExecutionGuard,
  ) {
    this.options = options;
    this.guard = guard;
    this.origin = origin;
    this.claimedAt = options.events === undefined ? 0 : performance.now();
    this.keeper = keeper;
    this.deadlines = deadlines;
    this.ref = ref;
    this.token = claim.token;
    this.transaction = transaction;
    this.progress = claim.resumeFrom !== undefined;
    // Inside a transaction the checkpoint must use it: the store may be serialised behind it. Once
    // the transaction is over, a checkpoint through it would run outside any transaction.
    const checkpoint =
      transaction === undefined
        ? async (point: string, data?: unknown) => {
            await options.store.checkpoint(ref, claim.token, point, data);
            this.progress = true;
          }
        : async (point: string, data?: unknown) => {
            const closed = this.fence.closedBecause;
            if (closed !== undefined) throw new TransactionEndedError(`ctx.checkpoint() was called after ${closed}; nothing was written`);
            return transaction.checkpoint(ref, claim.token, point, data);
          };
    this.context = {
      key: ref.key,
      scope: ref.scope,
      takeover: claim.takeover,
      resumeFrom: claim.resumeFrom,
      recoveryData: claim.recoveryData,
      tx: transaction === undefined ? undefined : fenceHandle(transaction.tx, this.fence, 'ctx.tx'),
      checkpoint,
      discard: () => this.toDiscarded(),
      beginTransaction: () => this.beginPhaseTransaction(),
      suspend: () => this.toSuspended(),
    };
    keeper.add(this);
  }

  /**
   * Lets the adapter watch the response this execution answers through, from the lease keeper's
   * ticks (not a listener per request, which costs more than the claim): when `abandoned(target)`
   * says the answer went out without passing `finish` (a hijacked reply), nothing was stored and
   * the claim is released. Whether the client is still connected is deliberately not a reason:
   * the lease belongs to the handler, which may still act after its client left, so the claim is
   * renewed for as long as it runs and its result is completed when it ends (a retry meanwhile
   * gets 409, then the replay). The target is let go of when the execution ends.
   */
  watch<Target extends object>(target: Target, abandoned: AbandonedCheck<Target>): void {
    this.watched = target;
    this.abandoned = abandoned as AbandonedCheck<never>;
  }

  private async beginPhaseTransaction(): Promise<FencedTransaction> {
    const { store } = this.options;
    if (this.transaction) {
      throw new TransactionalModeError(
        'ctx.beginTransaction() is refused in transactional mode: the request already runs in one transaction (use ctx.tx)',
      );
    }
    if (this.state === 'finished') throw new ExecutionEndedError('ctx.beginTransaction() after the request has ended');
    if (!isTransactionalStore(store)) {
      throw new NotTransactionalError(`ctx.beginTransaction() needs a store with transactions; the ${store.name} store has none`);
    }
    const begin = store.beginTransaction();
    begin.catch(() => {});
    const tx = await this.deadlines.bound(begin, 'beginTransaction', (late) => void late.rollback().catch(() => {}));
    // The phase's handle refuses use once the phase committed or rolled back: its connection is
    // back in the pool by then.
    const fence: { closedBecause: string | undefined } = { closedBecause: undefined };
    let checkpointed = false;
    return {
      tx: fenceHandle(tx.tx, fence, 'the phase transaction'),
      checkpoint: async (point, data) => {
        await tx.checkpoint(this.ref, this.token, point, data);
        checkpointed = true;
      },
      commit: async () => {
        fence.closedBecause ??= 'it committed';
        await tx.commit();
        if (checkpointed) this.progress = true;
      },
      rollback: () => {
        fence.closedBecause ??= 'it rolled back';
        return tx.rollback();
      },
    };
  }

  /** Called by the lease keeper every third of a lease: extends the lease, or learns that it was lost. */
  renew(): void {
    if (this.watched !== undefined && (this.abandoned as AbandonedCheck<object>)(this.watched)) {
      void this.abort();
      return;
    }
    if (Date.now() - this.startedAt >= this.options.maxExecutionMs) {
      this.expire();
      return;
    }
    const { store, leaseMs, onError, renewLease } = this.options;
    if (!renewLease) return;
    // A renewal still waiting for the store (queued behind a pool the handlers' transactions hold)
    // is not sent again: one more per tick would only lengthen that queue. The keeper warns.
    if (this.renewingSince !== undefined) {
      this.keeper.renewalLate(() => this.leaseName(), Date.now() - this.renewingSince, true);
      return;
    }
    const sentAt = (this.renewingSince = Date.now());
    const renewals: Array<Promise<unknown>> = [];
    // The guard's lease must not run out while this one is held: an old instance would take it over and run.
    if (this.guard !== undefined) renewals.push(store.renew(this.guard.ref, this.guard.token, leaseMs).catch(onError));
    renewals.push(
      store.renew(this.ref, this.token, leaseMs).then(
        (ok) => {
          if (!ok) {
            this.toLost();
            this.stopRenewal();
            this.tellLeaseLost('renew');
          }
        },
        (error: unknown) => {
          onError(error);
          const { events } = this.options;
          if (events?.wants('storeError')) events.emit('storeError', { operation: 'renew', error, request: this.who(events) });
        },
      ),
    );
    void Promise.allSettled(renewals).then(() => {
      this.renewingSince = undefined;
      const tookMs = Date.now() - sentAt;
      if (tookMs > this.keeper.periodMs) this.keeper.renewalLate(() => this.leaseName(), tookMs, false);
    });
  }

  /** The lease as the keeper's warning names it: the key (hashed with `redactKeys`) and its scope. */
  private leaseName(): string {
    const { scope, key } = this.ref;
    if (this.options.redactKeys) return `key ${redactedKey(scope, key)}`;
    return scope === '' ? `key ${JSON.stringify(key)}` : `key ${JSON.stringify(key)} in scope ${JSON.stringify(scope)}`;
  }

  private stopRenewal(): void {
    this.keeper.delete(this);
  }

  /** The ceiling passed (`expire`); false when refused: already overtime, or finished. */
  private toOvertime(): boolean {
    if (this.state !== 'running' && this.state !== 'lost') return false;
    this.state = 'overtime';
    return true;
  }

  /** A renewal was refused: only a running execution takes it in (see `ExecutionState`). */
  private toLost(): void {
    if (this.state === 'running') this.state = 'lost';
  }

  /**
   * Ends the execution, once: returns the state it ended from, or undefined when it had ended
   * already. Lets go of the watched response: the Express adapter keeps its state in a WeakMap
   * keyed by the response, and a value pointing back at its key would keep every finished request
   * alive through young-generation collections (docs/performance.md).
   */
  private toFinished(): Exclude<ExecutionState, 'finished'> | undefined {
    const from = this.state;
    if (from === 'finished') return undefined;
    this.state = 'finished';
    this.fence.closedBecause ??= 'its request ended';
    this.watched = undefined;
    this.stopRenewal();
    return from;
  }

  /** `ctx.discard()`: refused after `ctx.suspend()`. */
  private toDiscarded(): void {
    if (this.ending === 'result') this.ending = 'discarded';
  }

  /** `ctx.suspend()`, from either other ending. */
  private toSuspended(): void {
    this.ending = 'suspended';
  }

  /**
   * Ends the execution with the handler's answer: its status, headers (a fetch `Headers`, an
   * entries list, or a Node-style record such as `res.getHeaders()`) and body bytes. The engine
   * keeps what it replays (the allowlisted headers) and stores it. Returns undefined when that
   * answer should be sent, or an error to send instead (in transactional mode, when nothing was
   * committed). The stored form (`finish(storedResponse, threw)`) is accepted as well.
   *
   * `threw` tells that the response is the framework's answer to a thrown error: it is stored
   * (Stripe keeps 500s) unless the mode is transactional, where the rollback means nothing happened.
   */
  finish(status: number, headers: ResponseHeaders, body: Uint8Array, threw?: boolean): Promise<IdempotencyHttpError | undefined>;
  finish(response: StoredResponse, threw?: boolean): Promise<IdempotencyHttpError | undefined>;
  finish(
    statusOrResponse: number | StoredResponse,
    headersOrThrew?: ResponseHeaders | boolean,
    body?: Uint8Array,
    threw = false,
  ): Promise<IdempotencyHttpError | undefined> {
    if (typeof statusOrResponse !== 'number') return this.store(statusOrResponse, headersOrThrew === true);
    const headers = headersOrThrew as ResponseHeaders;
    const allow = this.options.replayHeaders;
    const stored = isIterable(headers)
      ? toStoredResponse(statusOrResponse, headers, body!, allow)
      : toStoredResponseFromRecord(statusOrResponse, headers, body!, allow);
    return this.store(stored, threw);
  }

  private async store(response: StoredResponse, threw: boolean): Promise<IdempotencyHttpError | undefined> {
    const from = this.toFinished();
    if (from === undefined) return undefined;
    const { events } = this.options;
    if (events === undefined) {
      if (this.guard === undefined) return this.complete(response, threw, from);
      const outcome = await this.complete(response, threw, from);
      await this.closeGuard();
      return outcome;
    }
    const answeredAt = performance.now();
    const outcome = await this.complete(response, threw, from, events);
    if (this.guard !== undefined) await this.closeGuard();
    const { scope, key, method, path } = this.who(events);
    // The fields by name: `{ ...who, more }` costs microseconds on Node 20 (docs/performance.md).
    events.emit('complete', {
      scope,
      key,
      method,
      path,
      outcome: this.outcome,
      status: response.status,
      bodyBytes: response.body?.byteLength ?? 0,
      handlerMs: Math.round((answeredAt - this.claimedAt) * 10) / 10,
      storeMs: since(answeredAt),
    });
    return outcome;
  }

  /** How the request ended, for the `complete` event (set by `complete`). */
  private outcome: CompleteEvent['outcome'] = 'stored';

  /** Stores (or not) the answer of an execution that has just finished, `from` the state it was in. */
  private async complete(
    response: StoredResponse,
    threw: boolean,
    from: Exclude<ExecutionState, 'finished'>,
    events?: EventSink,
  ): Promise<IdempotencyHttpError | undefined> {
    const { store, onError } = this.options;
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
    // Each store applies its own size limit (fitResponse) when it writes the record.
    this.outcome = (response.body?.byteLength ?? 0) > store.maxResponseBytes ? 'omitted' : 'stored';
    if (tx === undefined) {
      // The effect has happened: whatever the store says now, the client gets the real answer.
      await this.deadlines.bound(store.complete(this.ref, this.token, response), 'complete').then(
        () => {
          this.kept = response;
        },
        (error: unknown) => {
          onError(error);
          if (events !== undefined) this.completionFailed(events, error);
        },
      );
      return undefined;
    }
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

  /** The store did not take the completion: a lost lease (fenced out by the token), or a store error. */
  private completionFailed(events: EventSink, error: unknown): void {
    this.outcome = 'failed';
    if (error instanceof LeaseLostError) this.tellLeaseLost('complete');
    else if (events.wants('storeError')) events.emit('storeError', { operation: 'complete', error, request: this.who(events) });
  }

  private tellLeaseLost(during: LeaseLostEvent['during']): void {
    const { events } = this.options;
    if (events?.wants('leaseLost')) {
      const { scope, key, method, path } = this.who(events);
      events.emit('leaseLost', { scope, key, method, path, during });
    }
  }

  /** The request as events name it. */
  private who(events: EventSink): EventRequest {
    return events.request(this.ref.scope, this.ref.key, this.origin?.method ?? '', this.origin?.path ?? '');
  }

  /**
   * Ends the guard (`previousScope`'s record) as this execution ended: completed with the answer
   * its own record holds, so an instance on the old hook replays it; released otherwise, since
   * nothing is stored under either scope (a suspended record's progress stays under its own).
   */
  private async closeGuard(): Promise<void> {
    const guard = this.guard!;
    const { store, onError } = this.options;
    const kept = this.kept;
    const closing = kept === undefined ? store.release(guard.ref, guard.token) : store.complete(guard.ref, guard.token, kept);
    await this.deadlines.bound(closing, kept === undefined ? 'release' : 'complete').catch((error: unknown) => {
      // A stale token on a release: nothing of ours is left there.
      if (!(kept === undefined && error instanceof LeaseLostError)) onError(error);
    });
  }

  /** Ends the execution without a result (the handler was abandoned before producing one). */
  async abort(): Promise<void> {
    if (this.toFinished() === undefined) return;
    if (this.transaction) await this.transaction.rollback().catch(this.options.onError);
    // Read only now: a handler still running may suspend while the rollback waits.
    if (this.ending === 'suspended') {
      this.outcome = 'suspended';
      await this.yieldLease();
    } else await this.letGo();
    if (this.guard !== undefined) await this.closeGuard();
    const { events } = this.options;
    if (events?.wants('complete')) {
      const handlerMs = since(this.claimedAt);
      const { scope, key, method, path } = this.who(events);
      events.emit('complete', { scope, key, method, path, outcome: this.outcome, status: 0, bodyBytes: 0, handlerMs, storeMs: 0 });
    }
  }

  /**
   * Ends a claim that produced no result: released, so a retry runs at once; or, when the record
   * holds committed progress, left in flight with its lease given back, so a retry resumes there.
   */
  private async letGo(): Promise<void> {
    if (this.progress) {
      this.outcome = 'suspended';
      await this.yieldLease();
    } else {
      this.outcome = 'released';
      await this.releaseQuietly();
    }
  }

  /** A suspended request keeps its record and recovery points; the lease ends now, so a retry may resume. */
  private async yieldLease(): Promise<void> {
    await this.deadlines.bound(this.options.store.renew(this.ref, this.token, 0), 'renew').catch(this.options.onError);
  }

  /**
   * The handler ran past `maxExecutionMs`: renewal stops but the claim stays, so the lease runs out
   * and a retry takes over with the last recovery point (releasing would let a retry run at once).
   * In transactional mode the transaction is rolled back now and `ctx.tx` refuses every later call,
   * so nothing the handler does afterwards can commit. The handler itself cannot be stopped: when
   * it ends, `finish` still runs (outside transactional mode its completion is fenced by the token).
   */
  private expire(): void {
    if (!this.toOvertime()) return;
    this.stopRenewal();
    const { maxExecutionMs, onError } = this.options;
    const tx = this.transaction;
    onError(new ExecutionTimeoutHttpError(maxExecutionMs, tx === undefined ? 'unknown' : 'nothing'));
    if (tx === undefined) return;
    this.fence.closedBecause = `its request ran past maxExecutionMs (${maxExecutionMs} ms) and was rolled back`;
    void tx.rollback().catch(onError);
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

function isIterable(headers: ResponseHeaders): headers is Iterable<readonly [string, string | number | readonly string[] | undefined]> {
  return typeof (headers as { [Symbol.iterator]?: unknown })[Symbol.iterator] === 'function';
}

