/**
 * A publisher's retry inside JetStream's duplicate window, and getting past the window, without a
 * wall-clock threshold.
 *
 * The server drops a repeat of a `Nats-Msg-Id` that arrives within the stream's
 * `duplicate_window` of the stored one. A 1 s window made "the retry sent right away was dropped"
 * depend on how loaded the machine was, so the tests only checked it when a clock reading allowed.
 * Instead the stream starts with a window longer than any test's own timeout (`LONG_WINDOW_MS`):
 * every retry a test sends is inside it, and the server must drop it. To publish past the window
 * afterwards, the test narrows it (`narrowWindow`) and polls the server with a probe id until the
 * probe is accepted again, which is when every id published before the probe is accepted again too.
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import type { NatsPubAck, NatsPublisher } from '../../src/messaging/nats.js';
import { natsPublishOnce } from '../../src/messaging/index.js';

/** The duplicate window the tests' streams start with: longer than any of their timeouts. */
export const LONG_WINDOW_MS = 15 * 60_000;

export interface PublishedWithRetry {
  readonly first: NatsPubAck;
  readonly retry: NatsPubAck;
}

/** Publishes `id`, then at once a publisher's retry of it (as after a lost PubAck). */
export async function publishWithRetry(js: NatsPublisher, subject: string, payload: string, id: string): Promise<PublishedWithRetry> {
  const first = await natsPublishOnce(js, subject, payload, id);
  const retry = await natsPublishOnce(js, subject, payload, id);
  return { first, retry };
}

/** Narrows the stream's duplicate window (the server then forgets ids older than it). */
export async function narrowWindow(jsm: JetStreamManager, stream: string, windowMs: number): Promise<void> {
  const info = await jsm.streams.update(stream, { duplicate_window: nanos(windowMs) });
  if (info.config.duplicate_window !== nanos(windowMs)) throw new Error(`the duplicate window of ${stream} is ${info.config.duplicate_window} ns, not ${windowMs} ms`);
}
