/**
 * The completer's own loop: `start()` runs rounds until `stop()`. A round that finds a full batch
 * (and completes some of it) is followed at once, so a backlog drains; otherwise the next round
 * waits the interval, spread by jitter so instances started together (a deploy) drift apart
 * instead of listing in step. A round whose listing fails is reported and retried with backoff:
 * the store being down must not end the loop.
 */
import { since } from '../core/events.js';
import { MAX_TIMER_MS, optionReader } from '../core/option-reader.js';
import type { RecordRef } from '../core/store.js';
import type { CompleterTeller } from './completer-events.js';

export interface CompleterStartOptions {
  /**
   * The pause between rounds, in ms. A round that found a full batch and completed some of it is
   * followed at once instead (a backlog); one that fails is followed after a pause that doubles
   * with each failure in a row, up to `maxBackoffMs`.
   * @default 5_000
   */
  readonly intervalMs?: number;
  /** Records listed per round. @default the completer's `batchSize` (100) */
  readonly batchSize?: number;
  /**
   * How much each pause varies, as a fraction of it: each is drawn uniformly from
   * `pause × (1 ± jitter)`, so that instances started together do not list in step. `1` is full
   * jitter (0 to twice the pause), `0` none. The first round waits up to `intervalMs × jitter`.
   * @default 0.2
   */
  readonly jitter?: number;
  /** The longest pause after rounds that keep failing, in ms; at least `intervalMs`. @default max(60_000, intervalMs) */
  readonly maxBackoffMs?: number;
  /**
   * Whether the loop's timer keeps the process alive. By default it does not (it is unref'd), so a
   * service exits as it would without the completer; a process whose only work is the completer
   * (a worker) passes `true`. Either way, `await stop()` is how to shut down cleanly.
   * @default false
   */
  readonly keepAlive?: boolean;
}

export interface CompleterStopOptions {
  /**
   * How long to wait for the record in hand, in ms. When it passes, the record is given back
   * unfinished: its lease ends at once (renewed to 0 ms), so a client retry or another completer
   * resumes it from its last recovery point, and `stop()` resolves. Nothing is written under
   * its claim after that.
   * @default Infinity (wait for the record in hand to be finished)
   */
  readonly timeoutMs?: number;
}

/** Starting and stopping a completer's loop. */
export interface CompleterRunner {
  /**
   * Runs rounds in a loop until `stop()`; returns at once (the first round starts on a timer).
   * Throws when the loop already runs or is stopping. Safe on several instances at once: each
   * record is claimed by one.
   */
  start(options?: CompleterStartOptions): void;
  /**
   * Stops the loop: no new round starts, and the round in progress takes no further record but
   * finishes the one it holds (or, past `timeoutMs`, gives it back). Resolves when that is done;
   * at once when the loop is not running. Call it on shutdown (SIGTERM) before closing the store.
   */
  stop(options?: CompleterStopOptions): Promise<void>;
}

/** What a round of the loop and `stop()` share. */
export interface RoundControl {
  /** `stop()` was called: the round takes no further record. */
  stopped: boolean;
  /** `stop()`'s deadline passed: the record in hand is given back, and one claimed from now on at once. */
  yielding: boolean;
  /** `stop()` resolved: nothing more is told about this loop. */
  closed: boolean;
  /** Gives back the record in hand; set while the round holds one. */
  giveBack: (() => Promise<void>) | undefined;
}

/** What a round answers, as the loop reads it. */
interface RoundCounts {
  readonly examined: number;
  readonly completed: readonly unknown[];
  readonly skipped: readonly unknown[];
  readonly failed: readonly unknown[];
  readonly yielded: readonly unknown[];
}

export interface RunnerDeps {
  /** The completer's `batchSize`. */
  readonly batchSize: number;
  readonly round: (limit: number, control: RoundControl) => Promise<RoundCounts>;
  readonly teller: CompleterTeller;
  /** The completer's `onError`, guarded (never throws). */
  readonly report: (error: unknown, record: RecordRef | undefined) => void;
}

interface Loop {
  readonly control: RoundControl;
  timer: ReturnType<typeof setTimeout> | undefined;
  /** The round in progress or the last one; never rejects. */
  current: Promise<void> | undefined;
  stopping: Stopping | undefined;
}

interface Stopping {
  /** Resolves when the round in progress ended or gave its record back. */
  readonly done: Promise<void>;
  /** The deadlines of every `stop({ timeoutMs })` call, cleared when done. */
  readonly deadlines: Array<ReturnType<typeof setTimeout>>;
  /** Gives back the record in hand (once). */
  readonly yieldNow: () => Promise<void>;
}

export function completerRunner(deps: RunnerDeps): CompleterRunner {
  let loop: Loop | undefined;

  return {
    start(options: CompleterStartOptions = {}): void {
      const read = optionReader('completer.start()', options);
      const intervalMs = read.duration('intervalMs', { default: 5_000, min: 1 });
      const batchSize = read.integer('batchSize', { default: deps.batchSize, min: 1 });
      const jitter = read.number('jitter', { default: 0.2, min: 0, max: 1 });
      const maxBackoffMs = read.duration('maxBackoffMs', { default: Math.max(60_000, intervalMs), min: intervalMs });
      const keepAlive = read.boolean('keepAlive', { default: false });
      read.done();
      if (loop !== undefined) {
        // Like a server's listen() twice (ERR_SERVER_ALREADY_LISTEN): a second loop is a mistake, not a choice.
        throw new Error(`completer.start(): the completer is already ${loop.stopping ? 'stopping; await stop() before starting it again' : 'running; call stop() first'}`);
      }
      const control: RoundControl = { stopped: false, yielding: false, closed: false, giveBack: undefined };
      const running: Loop = { control, timer: undefined, current: undefined, stopping: undefined };
      loop = running;
      let failures = 0;

      const spread = (ms: number) => Math.min(MAX_TIMER_MS, Math.round(ms * (1 + jitter * (2 * Math.random() - 1))));
      const schedule = (ms: number) => {
        running.timer = setTimeout(() => {
          running.timer = undefined;
          running.current = round();
        }, ms);
        if (!keepAlive) running.timer.unref?.();
      };

      async function round(): Promise<void> {
        const startedAt = performance.now();
        let counts: RoundCounts | undefined;
        let error: unknown;
        try {
          counts = await deps.round(batchSize, control);
          failures = 0;
        } catch (failure) {
          error = failure;
          failures++;
        }
        let next: number | undefined;
        if (!control.stopped) {
          if (counts === undefined) next = spread(Math.min(maxBackoffMs, intervalMs * 2 ** (failures - 1)));
          // A full batch with progress: more are waiting. Without progress (records it must skip
          // fill the batch) running at once would only list the same records again.
          else next = counts.examined >= batchSize && counts.completed.length > 0 ? 0 : spread(intervalMs);
          schedule(next);
        }
        if (control.closed) return;
        const durationMs = since(startedAt);
        if (counts === undefined) {
          deps.report(error, undefined);
          deps.teller.round('roundFailed', { examined: 0, completed: 0, skipped: 0, failed: 0, yielded: 0, durationMs, failures, error, nextInMs: next });
        } else {
          const { examined, completed, skipped, failed, yielded } = counts;
          deps.teller.round('round', {
            examined,
            completed: completed.length,
            skipped: skipped.length,
            failed: failed.length,
            yielded: yielded.length,
            durationMs,
            failures,
            nextInMs: next,
          });
        }
      }

      schedule(Math.round(intervalMs * jitter * Math.random()));
    },

    async stop(options: CompleterStopOptions = {}): Promise<void> {
      const read = optionReader('completer.stop()', options);
      const timeoutMs = read.duration('timeoutMs', { default: Infinity, min: 0, infinity: true });
      read.done();
      const running = loop;
      if (running === undefined) return;
      running.stopping ??= beginStopping(running, () => {
        if (loop === running) loop = undefined;
      });
      // A later call may bring a deadline (a second SIGTERM): the earliest one given applies.
      // Not unref'd: the caller asked to wait this long for the record in hand.
      if (timeoutMs !== Infinity) running.stopping.deadlines.push(setTimeout(() => void running.stopping!.yieldNow(), timeoutMs));
      return running.stopping.done;
    },
  };
}

function beginStopping(running: Loop, ended: () => void): Stopping {
  const { control } = running;
  control.stopped = true;
  clearTimeout(running.timer);
  let gaveBack!: () => void;
  const given = new Promise<void>((resolve) => (gaveBack = resolve));
  const deadlines: Array<ReturnType<typeof setTimeout>> = [];
  const done = Promise.race([running.current ?? Promise.resolve(), given]).then(() => {
    for (const deadline of deadlines) clearTimeout(deadline);
    control.closed = true;
    ended();
  });
  const yieldNow = async () => {
    if (control.yielding) return;
    control.yielding = true;
    await control.giveBack?.();
    gaveBack();
  };
  return { done, deadlines, yieldNow };
}
