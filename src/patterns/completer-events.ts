/**
 * What a completer tells about its work, as typed events an operator can count, log or alert on:
 * its `events` option, shaped like the middleware's (`IdempotencyEvents`) and the consumers'
 * (`DeliveryEvents`): one optional listener per event, nothing built for an event nobody listens
 * to, and a listener that throws is reported to `onError` without changing what the completer does.
 */
import { redactedKey } from '../core/events.js';
import type { RecordRef } from '../core/store.js';

/** One abandoned record the completer worked on. */
export interface CompleterRecordEvent {
  /** The record's scope (the tenant). */
  readonly scope: string;
  /** The record's key, or with `redactKeys` a stable hash of scope and key (`sha256:` + 32 hex). */
  readonly key: string;
  /** The phases definition the record's recovery data names; undefined when it failed before it was claimed. */
  readonly phases: string | undefined;
  /** The recovery point it resumed from; undefined when it failed before it was claimed. */
  readonly resumeFrom: string | undefined;
  /** From the claim to this event, in ms (0 for `resumed`). */
  readonly durationMs: number;
  /** `completed`: the status stored for replays. */
  readonly status?: number;
  /** `failed`: what failed. */
  readonly error?: unknown;
}

/** One round of the loop `start()` runs. */
export interface CompleterRoundEvent {
  /** Records listed as abandoned (0 when the listing failed). */
  readonly examined: number;
  readonly completed: number;
  readonly skipped: number;
  readonly failed: number;
  /** Given back unfinished because `stop()`'s deadline passed. */
  readonly yielded: number;
  /** How long the round took, in ms. */
  readonly durationMs: number;
  /** Rounds in a row whose listing failed, this one included (0 after a round that listed). */
  readonly failures: number;
  /** `roundFailed`: what failed (the store's `listAbandoned`). */
  readonly error?: unknown;
  /** When the next round starts, in ms from now: 0 for a backlog (a full batch); undefined when stopping. */
  readonly nextInMs: number | undefined;
}

/**
 * Listeners for a completer's work, each optional. They run synchronously inside the round: keep
 * them cheap (count, log). One that throws is reported to `onError` and changes nothing.
 */
export interface CompleterEvents {
  /** A record was claimed and its phases are resuming from its recovery point. */
  readonly resumed?: (event: CompleterRecordEvent) => void;
  /** A resumed record was completed: a retry replays its stored answer. */
  readonly completed?: (event: CompleterRecordEvent) => void;
  /** Given up for this round: its phases (or its claim) failed; the record stays in flight, resumable, its lease given back. */
  readonly failed?: (event: CompleterRecordEvent) => void;
  /** Given back unfinished at `stop({ timeoutMs })`'s deadline: its lease ended at once, so a retry or another completer resumes it. */
  readonly yielded?: (event: CompleterRecordEvent) => void;
  /** A round of `start()`'s loop ended (not told for `runOnce()`, whose caller has the report). */
  readonly round?: (event: CompleterRoundEvent) => void;
  /** A round of `start()`'s loop could not list records (the store is down); the loop goes on, backing off. */
  readonly roundFailed?: (event: CompleterRoundEvent) => void;
}

export type CompleterEventName = keyof CompleterEvents;

/** What a record event says beyond the record itself. */
type RecordFacts = Omit<CompleterRecordEvent, 'scope' | 'key'>;

/** The resolved `events` option: who listens, how keys are named, where a listener's failure goes. */
export class CompleterTeller {
  readonly #listeners: CompleterEvents;
  readonly #redactKeys: boolean;
  readonly #onError: (error: unknown, record: RecordRef | undefined) => void;

  constructor(listeners: CompleterEvents, redactKeys: boolean, onError: (error: unknown, record: RecordRef | undefined) => void) {
    this.#listeners = listeners;
    this.#redactKeys = redactKeys;
    this.#onError = onError;
  }

  /** Tells a record event; `facts` is only called when someone listens. */
  record(name: 'resumed' | 'completed' | 'failed' | 'yielded', ref: RecordRef, facts: () => RecordFacts): void {
    const listener = this.#listeners[name];
    if (listener === undefined) return;
    try {
      listener({ scope: ref.scope, key: this.#redactKeys ? redactedKey(ref.scope, ref.key) : ref.key, ...facts() });
    } catch (error) {
      this.#onError(error, ref);
    }
  }

  round(name: 'round' | 'roundFailed', event: CompleterRoundEvent): void {
    const listener = this.#listeners[name];
    if (listener === undefined) return;
    try {
      listener(event);
    } catch (error) {
      this.#onError(error, undefined);
    }
  }
}
