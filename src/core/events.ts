/**
 * What the middleware decided for each request, as typed events an operator can count, log or
 * trace: the `events` option. Nothing is built for an event nobody listens to: the engine asks
 * `wants(name)` before it reads a clock or allocates the event.
 */
import { createHash } from 'node:crypto';

/** Who a request was, as every event after the claim names it. */
export interface EventRequest {
  /** The tenant the `scope` hook returned. */
  readonly scope: string;
  /** The Idempotency-Key, or with `redactKeys` a stable hash of scope and key (`sha256:` + 32 hex). */
  readonly key: string;
  readonly method: string;
  /** The path without its query string (which may carry secrets). */
  readonly path: string;
}

/** A request was claimed and its handler is about to run. */
export interface ExecuteEvent extends EventRequest {
  /** True when an earlier owner's lease ran out and this request took the key over. */
  readonly takeover: boolean;
  /** How long the claim took at the store, in ms. */
  readonly storeMs: number;
}

/** An earlier owner's lease had run out: this request took its key over (also an `execute`). */
export interface TakeoverEvent extends EventRequest {
  /** The last recovery point the earlier owner reached, if any. */
  readonly resumeFrom: string | undefined;
}

/** A stored response was replayed. */
export interface ReplayEvent extends EventRequest {
  /** The replayed status. */
  readonly status: number;
  readonly storeMs: number;
}

/** 409: the key is in flight (another request holds it). */
export interface ConflictEvent extends EventRequest {
  readonly status: 409;
  /** The `Retry-After` hint sent, in ms. */
  readonly retryAfterMs: number;
  /**
   * The holder as the 409 described it: `alive` (its record changed within 1.5 renewal periods)
   * or `unresponsive` (it stopped renewing; a retry can take over when its lease ends).
   */
  readonly owner: 'alive' | 'unresponsive';
  readonly storeMs: number;
}

/** 422: the key was used before with another request. */
export interface MismatchEvent extends EventRequest {
  readonly status: 422;
  readonly storeMs: number;
}

/** Refused before anything was claimed: 400 (missing or invalid key, invalid scope) or 413. */
export interface RejectedEvent {
  readonly status: number;
  /** The error's stable code (`ERR_IDEMKIT_MISSING_KEY`, …). */
  readonly code: string;
  readonly method: string;
  readonly path: string;
}

/** A request's lease was found lost: a renewal was refused, or its completion was fenced out. */
export interface LeaseLostEvent extends EventRequest {
  /** Where it was noticed. */
  readonly during: 'renew' | 'complete';
}

/** How a claimed request ended. */
export interface CompleteEvent extends EventRequest {
  /**
   * `stored`: the answer is kept for replays; `omitted`: kept without its body (over the store's
   * `maxResponseBytes`); `released`: nothing happened (threw in transactional mode, a 5xx there,
   * `discard()`, an abandoned request), the key is free; `suspended`: left in flight to resume;
   * `failed`: the store did not take the completion (see `storeError`).
   */
  readonly outcome: 'stored' | 'omitted' | 'released' | 'suspended' | 'failed';
  /** The handler's status (0 when it never answered). */
  readonly status: number;
  /** The answer's body size in bytes. */
  readonly bodyBytes: number;
  /** From the claim to the handler's answer, in ms. */
  readonly handlerMs: number;
  /** The completion at the store (complete, and commit in transactional mode), in ms. */
  readonly storeMs: number;
}

/** A store operation failed or timed out (the same error also reaches `onError` and `logger`). */
export interface StoreErrorEvent {
  readonly operation: 'claim' | 'beginTransaction' | 'complete' | 'renew';
  readonly error: unknown;
  /** The request, when the failure belongs to one that was already scoped. */
  readonly request: EventRequest | undefined;
}

/**
 * Listeners for the engine's decisions, each optional. A listener runs synchronously on the
 * request path: keep it cheap (count, log, set a span attribute). One that throws is reported to
 * `onError`/`logger` and does not change the answer.
 */
export interface IdempotencyEvents {
  readonly execute?: (event: ExecuteEvent) => void;
  readonly takeover?: (event: TakeoverEvent) => void;
  readonly replay?: (event: ReplayEvent) => void;
  readonly conflict?: (event: ConflictEvent) => void;
  readonly mismatch?: (event: MismatchEvent) => void;
  readonly rejected?: (event: RejectedEvent) => void;
  readonly leaseLost?: (event: LeaseLostEvent) => void;
  readonly complete?: (event: CompleteEvent) => void;
  readonly storeError?: (event: StoreErrorEvent) => void;
}

export type EventName = keyof IdempotencyEvents;
type EventOf<Name extends EventName> = Parameters<NonNullable<IdempotencyEvents[Name]>>[0];

export const EVENT_NAMES: readonly EventName[] = ['execute', 'takeover', 'replay', 'conflict', 'mismatch', 'rejected', 'leaseLost', 'complete', 'storeError'];

/** The resolved `events` option: who listens, and how a listener's failure is reported. */
export class EventSink {
  private readonly listeners: IdempotencyEvents;
  private readonly redactKeys: boolean;
  private readonly onError: (error: unknown) => void;

  constructor(listeners: IdempotencyEvents, redactKeys: boolean, onError: (error: unknown) => void) {
    this.listeners = listeners;
    this.redactKeys = redactKeys;
    this.onError = onError;
  }

  wants(name: EventName): boolean {
    return this.listeners[name] !== undefined;
  }

  emit<Name extends EventName>(name: Name, event: EventOf<Name>): void {
    const listener = this.listeners[name] as ((event: EventOf<Name>) => void) | undefined;
    if (listener === undefined) return;
    try {
      listener(event);
    } catch (error) {
      this.onError(error);
    }
  }

  /** The request as events name it (the key hashed with `redactKeys`). */
  request(scope: string, key: string, method: string, path: string): EventRequest {
    const query = path.indexOf('?');
    return {
      scope,
      key: this.redactKeys ? redactedKey(scope, key) : key,
      method,
      path: query === -1 ? path : path.slice(0, query),
    };
  }
}

/** A stable, non-reversible name for a key within its scope: the same request always hashes alike. */
export function redactedKey(scope: string, key: string): string {
  return `sha256:${createHash('sha256').update(scope).update('\u0000').update(key).digest('hex').slice(0, 32)}`;
}

/** Milliseconds from a `performance.now()` reading, to a tenth. */
export function since(start: number): number {
  return Math.round((performance.now() - start) * 10) / 10;
}
