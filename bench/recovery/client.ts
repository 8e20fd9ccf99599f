/**
 * The driver's client: places orders as a careful client would. One Idempotency-Key per order
 * (its id), reused on every retry; retries a refused or reset connection (the worker is dead or
 * restarting), 409 (in flight elsewhere), 429 and 5xx, after a short jittered pause (the server's
 * Retry-After hint, at most 1 s); gives up on an order only at its deadline.
 */
import type { Order, OrderAnswer } from './app.js';

export interface Outcome {
  readonly orderId: string;
  readonly startedAt: number;
  /** When the success answer arrived (epoch ms); undefined if none came before the deadline. */
  answeredAt?: number;
  answer?: OrderAnswer;
  attempts: number;
  /** The last failure, for the report of a lost order. */
  lastError?: string;
}

const RETRY_MS = 100;
const MAX_PAUSE_MS = 1_000;
/** One attempt's limit: DBOS's route waits for the workflow it started or found; idemkit's answers 409 at once. */
const ATTEMPT_TIMEOUT_MS = 60_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export async function placeOrder(baseUrl: string, order: Order, deadline: number): Promise<Outcome> {
  const outcome: Outcome = { orderId: order.orderId, startedAt: Date.now(), attempts: 0 };
  const body = JSON.stringify(order);
  while (Date.now() < deadline) {
    outcome.attempts++;
    let pause = RETRY_MS;
    try {
      const response = await fetch(`${baseUrl}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': order.orderId },
        body,
        signal: AbortSignal.timeout(Math.max(1, Math.min(ATTEMPT_TIMEOUT_MS, deadline - Date.now()))),
      });
      const text = await response.text();
      if (response.status === 201) {
        outcome.answer = JSON.parse(text) as OrderAnswer;
        outcome.answeredAt = Date.now();
        return outcome;
      }
      outcome.lastError = `${response.status} ${text.slice(0, 200)}`;
      if (response.status !== 409 && response.status !== 429 && response.status < 500) return outcome; // not retryable
      const hint = Number(response.headers.get('retry-after'));
      const hintMs = retryAfterMs(text) ?? (Number.isFinite(hint) && hint > 0 ? hint * 1000 : RETRY_MS);
      pause = Math.min(Math.max(hintMs, RETRY_MS), MAX_PAUSE_MS);
    } catch (error) {
      outcome.lastError = describe(error);
    }
    await sleep(pause * (0.5 + Math.random() / 2));
  }
  return outcome;
}

/** idemkit's problem answers carry the hint in ms (`retryAfterMs`); Retry-After has whole seconds. */
function retryAfterMs(text: string): number | undefined {
  try {
    const value = (JSON.parse(text) as { retryAfterMs?: unknown }).retryAfterMs;
    return typeof value === 'number' && value > 0 ? value : undefined;
  } catch {
    return undefined;
  }
}

function describe(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error instanceof Error ? error.message : String(error));
}

/** Places every order, `concurrency` at a time, telling `onAnswer` of each finished one. */
export async function placeAll(
  baseUrl: string,
  orders: readonly Order[],
  options: { readonly concurrency: number; readonly deadlineMs: number; readonly inFlight: Set<string>; readonly onDone?: (outcome: Outcome) => void },
): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  let next = 0;
  const lane = async () => {
    while (next < orders.length) {
      const order = orders[next++]!;
      options.inFlight.add(order.orderId);
      const outcome = await placeOrder(baseUrl, order, Date.now() + options.deadlineMs);
      options.inFlight.delete(order.orderId);
      outcomes.push(outcome);
      options.onDone?.(outcome);
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.concurrency, orders.length) }, lane));
  return outcomes;
}
