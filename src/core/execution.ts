import type { IdempotencyHttpError } from './errors.js';
import { ExecutionEndedError, ExecutionTimeoutHttpError, TransactionalModeError, TransactionEndedError } from './errors.js';
import type { Deadlines } from './deadlines.js';
import type { LeaseKeeper } from './lease-keeper.js';
import type { ResolvedOptions } from './options.js';
import type { Claim, RecordRef, StoreTransaction, StoredResponse } from './store.js';
import type { ResponseHeaders } from './response.js';
import { toStoredResponse, toStoredResponseFromRecord } from './response.js';
import { fenceHandle } from './tx-fence.js';
import { SLOT } from './slot-list.js';
import { redactedKey, since } from './events.js';
import type { FencedTransaction, IdempotencyContext } from './execution-context.js';
import { beginPhaseTransaction } from './execution-context.js';
import type { ExecutionGuard, RequestOrigin } from './execution-finish.js';
import { HeldClaim } from './execution-finish.js';
import type { EndedFrom, ExecutionState } from './execution-state.js';
import { discardedFrom, lostFrom, overtimeFrom } from './execution-state.js';

export type { ContextFor, FencedTransaction, HandlerTx, IdempotencyContext } from './execution-context.js';
export type { ExecutionGuard, RequestOrigin } from './execution-finish.js';

/** Tells, at each lease-keeper tick, whether the answer went out without `finish` (a hijacked reply). */
export type AbandonedCheck<Target> = (target: Target) => boolean;

/**
 * One claimed request while its handler runs: lease renewal, checkpoints, and the fenced finish.
 * Its claim's state moves as execution-state.ts says; how the claim's record ends is `HeldClaim`'s
 * (execution-finish.ts), and the handler's context is typed in execution-context.ts.
 */
export class Execution extends HeldClaim {
  readonly context: IdempotencyContext;
  private readonly keeper: LeaseKeeper;
  /** What the adapter watches (its response), and how; see `watch`. */
  private watched: object | undefined;
  private abandoned: AbandonedCheck<never> | undefined;
  private readonly startedAt = Date.now();
  /** Closed when the execution ends (or runs past `maxExecutionMs`): `ctx.tx` refuses use from then on. */
  private readonly fence: { closedBecause: string | undefined } = { closedBecause: undefined };
  /** Where the claim stands: overtime is past `maxExecutionMs`, no longer renewed, in transactional mode rolled back. */
  private state: ExecutionState = 'running';
  /** When the renewal still waiting for the store was sent (`Date.now()`); undefined when none waits. */
  private renewingSince: number | undefined;
  /** Its place among the lease keeper's executions (`SlotList`). */
  [SLOT] = -1;

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
    super(options, ref, claim, transaction, deadlines, origin, guard);
    this.keeper = keeper;
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

  private beginPhaseTransaction(): Promise<FencedTransaction> {
    if (this.transaction) {
      return Promise.reject(
        new TransactionalModeError('ctx.beginTransaction() is refused in transactional mode: the request already runs in one transaction (use ctx.tx)'),
      );
    }
    if (this.state === 'finished') return Promise.reject(new ExecutionEndedError('ctx.beginTransaction() after the request has ended'));
    return beginPhaseTransaction(this.options.store, this.deadlines, this.ref, this.token, () => {
      this.progress = true;
    });
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
    const next = overtimeFrom(this.state);
    if (next === undefined) return false;
    this.state = next;
    return true;
  }

  /** A renewal was refused: only a running execution takes it in (see `ExecutionState`). */
  private toLost(): void {
    this.state = lostFrom(this.state);
  }

  /**
   * Ends the execution, once: returns the state it ended from, or undefined when it had ended
   * already. Lets go of the watched response: the Express adapter keeps its state in a WeakMap
   * keyed by the response, and a value pointing back at its key would keep every finished request
   * alive through young-generation collections (docs/performance.md).
   */
  private toFinished(): EndedFrom | undefined {
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
    this.ending = discardedFrom(this.ending);
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
    return this.store(this.storedAnswer(statusOrResponse, headersOrThrew as ResponseHeaders, body!), threw);
  }

  /**
   * `finish`, without waiting a turn when there is nothing to wait for: when the store writes a
   * record inside its call (the memory store), outside a transaction, with no previous-scope
   * guard, no event listener and nothing the handler said of its ending, the record holds the
   * answer once this returns, and the result is `finish`'s: undefined, send the handler's
   * answer. Otherwise it returns `finish`'s promise. For adapters whose framework takes a
   * callback: a Fastify handler that returns `reply` then finds it sent, rather than listening
   * for the end of the response (docs/performance.md).
   */
  finishAtOnce(status: number, headers: ResponseHeaders, body: Uint8Array, threw = false): IdempotencyHttpError | undefined | Promise<IdempotencyHttpError | undefined> {
    if (this.transaction !== undefined || this.guard !== undefined || this.options.events !== undefined || this.ending !== 'result' || !this.deadlines.settles('complete')) {
      return this.finish(status, headers, body, threw);
    }
    const stored = this.storedAnswer(status, headers, body);
    if (this.toFinished() === undefined) return undefined;
    // Settled before it returns: the record is complete now; its outcome is reported as `finish` does.
    void this.storeResult(stored, undefined);
    return undefined;
  }

  /** The handler's answer as the record keeps it: the allowlisted headers. */
  private storedAnswer(status: number, headers: ResponseHeaders, body: Uint8Array): StoredResponse {
    const allow = this.options.replayHeaders;
    return isIterable(headers) ? toStoredResponse(status, headers, body, allow) : toStoredResponseFromRecord(status, headers, body, allow);
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
}

function isIterable(headers: ResponseHeaders): headers is Iterable<readonly [string, string | number | readonly string[] | undefined]> {
  return typeof (headers as { [Symbol.iterator]?: unknown })[Symbol.iterator] === 'function';
}
