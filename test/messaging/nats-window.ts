/**
 * A publisher's retry inside JetStream's duplicate window, without a wall-clock threshold.
 *
 * The server drops a repeat of a `Nats-Msg-Id` that arrives within the stream's
 * `duplicate_window` of the stored one. Whether a retry sent "right away" arrives within a 1 s
 * window depends on how loaded the machine is, so a test must not assert that it was dropped
 * unless that is certain: the retry's PubAck came back less than the window after the first
 * publish was sent. The server stored the first no earlier than it was sent, and received the
 * retry no later than its ack came back, so the two are then less than a window apart.
 * A retry not known to be inside the window may be stored as a message of its own: the tests
 * count it as one more delivery for the consumer to catch.
 */
import type { NatsPubAck, NatsPublisher } from '../../src/messaging/index.js';
import { natsPublishOnce } from '../../src/messaging/index.js';

export interface PublishedWithRetry {
  readonly first: NatsPubAck;
  readonly retry: NatsPubAck;
  /** The retry certainly reached the server within `windowMs` of the first: it must be dropped. */
  readonly insideWindow: boolean;
}

export async function publishWithRetry(js: NatsPublisher, subject: string, payload: string, id: string, windowMs: number): Promise<PublishedWithRetry> {
  const sent = performance.now();
  const first = await natsPublishOnce(js, subject, payload, id);
  const retry = await natsPublishOnce(js, subject, payload, id);
  return { first, retry, insideWindow: performance.now() - sent < windowMs };
}
