// What follows a claim's answer, apart from the loop in `IdempotencyEngine.claim` (engine.ts) that
// gets it: the 409 for a key in flight (is its owner alive?), the events each outcome tells
// (replay, mismatch, conflict, execute and takeover, a rejection), and the decision for a store
// that is down.
import type { IdempotencyHttpError } from './errors.js';
import { KeyInFlightError, StoreBusyError, StoreFullError, StoreSchemaMissingError, StoreUnavailableError } from './errors.js';
import type { ResolvedOptions } from './options.js';
import type { Claim, RecordRef } from './store.js';
import type { EventSink } from './events.js';
import { since } from './events.js';
import type { Decision, RequestBody, RequestFacts } from './engine-request.js';

// Each event's fields by name: `{ ...who, more }` costs microseconds on Node 20 (docs/performance.md).

/** Tells `replay` listeners (the caller checked that there is one) about a stored answer sent again. */
export function tellReplay(events: EventSink, at: RecordRef, method: string, path: string, status: number, claimedFrom: number): void {
  const who = events.request(at.scope, at.key, method, path);
  events.emit('replay', { scope: who.scope, key: who.key, method: who.method, path: who.path, status, storeMs: since(claimedFrom) });
}

/** Tells `mismatch` listeners (the caller checked that there is one) about a key used for another request. */
export function tellMismatch(events: EventSink, at: RecordRef, method: string, path: string, claimedFrom: number): void {
  const who = events.request(at.scope, at.key, method, path);
  events.emit('mismatch', { scope: who.scope, key: who.key, method: who.method, path: who.path, status: 422, storeMs: since(claimedFrom) });
}

/** A store's answer that the key is in flight. */
type InFlight = Extract<Claim, { kind: 'in_flight' }>;

/**
 * Whether the request holding an in-flight record stopped renewing it: the record has not changed
 * for longer than `silentAfterMs` (1.5 of the engine's renewal periods; a live owner writes every
 * period). An age the store cannot tell counts as alive, as every owner did before stores said it.
 */
export function isUnresponsive(claim: InFlight, silentAfterMs: number): boolean {
  return claim.renewedMsAgo !== undefined && claim.renewedMsAgo > silentAfterMs;
}

/**
 * The 409 for a record in flight. Alive, its `Retry-After` is the hint of how long the original
 * likely takes (`hintMs`, the `retryAfterMs` option), bounded by what is left of its lease, since
 * after that a retry takes over anyway. Unresponsive, nothing will change before the lease ends,
 * when a retry can take the key over: then `Retry-After` is the lease's end.
 */
export function conflictOf(claim: InFlight, hintMs: number, unresponsive: boolean): KeyInFlightError {
  const leaseEndsInMs = claim.retryAfterMs;
  return new KeyInFlightError(unresponsive ? leaseEndsInMs : Math.min(hintMs, leaseEndsInMs), {
    owner: unresponsive ? 'unresponsive' : 'alive',
    leaseEndsInMs,
    renewedMsAgo: claim.renewedMsAgo,
  });
}

/** Tells `conflict` listeners (the caller checked that there is one) about a key still in flight, as `error` answers it. */
export function tellConflict(events: EventSink, at: RecordRef, method: string, path: string, error: KeyInFlightError, claimedFrom: number): void {
  const who = events.request(at.scope, at.key, method, path);
  const { retryAfterMs } = error;
  const owner = error.owner ?? 'alive';
  events.emit('conflict', { scope: who.scope, key: who.key, method: who.method, path: who.path, status: 409, retryAfterMs, owner, storeMs: since(claimedFrom) });
}

/** Tells `execute` (and `takeover`) listeners about a claim. */
export function tellAcquired(events: EventSink, claim: Extract<Claim, { kind: 'acquired' }>, facts: RequestFacts, ref: RecordRef, storeMs: number): void {
  const who = events.request(ref.scope, ref.key, facts.method, facts.path);
  const { scope, key, method, path } = who;
  if (claim.takeover && events.wants('takeover')) events.emit('takeover', { scope, key, method, path, resumeFrom: claim.resumeFrom });
  events.emit('execute', { scope, key, method, path, takeover: claim.takeover, storeMs });
}

/** Tells `rejected` listeners (the caller checked that there is one) about a request refused before any claim; `path` loses its query. */
export function tellRejected(events: EventSink, error: IdempotencyHttpError, method: string, path: string): void {
  const query = path.indexOf('?');
  events.emit('rejected', { status: error.status, code: error.code, method, path: query === -1 ? path : path.slice(0, query) });
}

/** The decision when the store failed: pass with `failOpen`, else the store's own problem or the generic 503. */
export function storeDown<Req, Body extends RequestBody<Req>>(
  options: Pick<ResolvedOptions<Req>, 'onError' | 'failOpen'>,
  error: unknown,
  body: Body,
): Decision<Req, Body> {
  options.onError(error);
  if (options.failOpen) return { kind: 'pass', failOpen: true, body };
  // A store that knows why it cannot serve says so: full or busy (retry later) or never migrated (retrying
  // cannot help). Anything else is the generic 503, whose detail tells the client nothing of the store.
  if (error instanceof StoreFullError || error instanceof StoreBusyError || error instanceof StoreSchemaMissingError) return { kind: 'reject', error };
  return { kind: 'reject', error: new StoreUnavailableError(undefined, { cause: error }) };
}
