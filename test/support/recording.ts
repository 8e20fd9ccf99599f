/** Small test doubles shared by the suites: a gate a test opens, a logger that keeps its lines, and events that do. */
import type { IdempotencyEvents } from '../../src/core/events.js';

/** A promise the test resolves when it chooses: a barrier, not a guessed delay. */
export function latch(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** An IdempotencyLogger that records each line's level and message. */
export function recordingLogger() {
  const lines: Array<{ level: string; message: string }> = [];
  return {
    lines,
    logger: {
      warn: (message: string) => lines.push({ level: 'warn', message }),
      error: (message: string) => lines.push({ level: 'error', message }),
    },
  };
}

/** Every event listener, recording what it was told, in order; `named` picks one kind's events. */
export function recordingEvents() {
  const seen: Array<[string, Record<string, unknown>]> = [];
  const on = (name: string) => (event: object) => void seen.push([name, { ...event }]);
  const events: Required<IdempotencyEvents> = {
    execute: on('execute'),
    takeover: on('takeover'),
    replay: on('replay'),
    conflict: on('conflict'),
    mismatch: on('mismatch'),
    rejected: on('rejected'),
    leaseLost: on('leaseLost'),
    complete: on('complete'),
    storeError: on('storeError'),
  };
  const named = (name: string) => seen.filter(([n]) => n === name).map(([, event]) => event);
  return { seen, events, named };
}
