// The N-way race on one key, released by a barrier: every request is written but for its last
// body byte, and only when all N are in do the last bytes go out together. No sleeps. "In" is
// proven by the server where it can be: a target that answers `Expect: 100-continue` says it has
// parsed each head (node's http server, and so Express, Fastify and Hono on node, does); for
// another target, "in" means written to the socket (decided in the first round, see answersContinue).
import http from 'node:http';
import https from 'node:https';
import { CheckConfigError, CheckRequestError } from './errors.js';
import type { HeldRequest, HttpAnswer, HttpRequest } from './http.js';
import { header, open, send } from './http.js';
import { freshKey, render } from './template.js';

/** What the race needs to know about the endpoint. */
export interface RaceTarget {
  readonly url: string | URL;
  /** @default 'POST' */
  readonly method?: string;
  /** Sent with every request (authorization, content-type, …). */
  readonly headers?: Readonly<Record<string, string>>;
  /** Body template (`{{uuid}}`, `{{n}}`, `{{key}}`); rendered once per round. @default '{"amount":100,"currency":"usd"}' */
  readonly body?: string;
  /** @default 'Idempotency-Key' */
  readonly keyHeader?: string;
  /** Per request, barrier wait included. @default 10000 */
  readonly timeoutMs?: number;
  /** The largest answer body read; a larger answer counts in `tooLarge`. @default 10485760 (10 MiB) */
  readonly maxResponseBytes?: number;
}

export interface RaceOptions {
  /** Requests per round, all with one key. @default 100 */
  readonly concurrency?: number;
  /** Rounds, each with a new key. @default 1 */
  readonly rounds?: number;
}

export interface RaceRound {
  readonly key: string;
  /** Distinct (status, body) answers among those not refused (409/429): 1 is correct. */
  readonly distinctOriginals: number;
  /** Answers without `Idempotent-Replayed: true` among those not refused: 1 when the target marks replays. */
  readonly unmarked: number;
  readonly refused: number;
  readonly hangs: number;
  readonly errors: number;
  /** Answers over `maxResponseBytes`, not read to the end. */
  readonly tooLarge: number;
  /** An answer that came before its request was released (the server did not wait for the body). */
  readonly early: number;
  /** Did a request sent after the round replay one of the round's originals? */
  readonly laterReplayMatches: boolean | undefined;
  /** Up to 3 differing originals, shortened. */
  readonly samples: readonly string[];
}

export interface RaceResult {
  readonly rounds: number;
  readonly concurrency: number;
  /** Σ over rounds of (distinct originals − 1): how many extra executions a client could see. */
  readonly doubleExecutions: number;
  /** Requests with no answer within the timeout. */
  readonly hangs: number;
  /** Requests that failed without an HTTP answer (reset, refused). */
  readonly errors: number;
  /** Answers over `maxResponseBytes` (reading stopped there). */
  readonly tooLarge: number;
  /** Answers per status code, over all rounds. */
  readonly statuses: Readonly<Record<string, number>>;
  readonly perRound: readonly RaceRound[];
  /** `100-continue`: the server acknowledged every head before any body was released; `written`: every request was on the wire. */
  readonly barrier: Barrier;
  readonly ms: number;
}

export type Barrier = '100-continue' | 'written';

export const DEFAULT_BODY = '{"amount":100,"currency":"usd"}';
/** The largest answer the check reads by default: 10 MiB. */
export const DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024;
const REFUSED = new Set([409, 429]);

/**
 * An answer that gave no result and says to try again: 409 and 429, and a 503 with Retry-After
 * (a store that did not answer in time: nothing ran). A bare 503 counts as an original, since a
 * handler that ran and then failed answers that way too.
 */
function refused(answer: HttpAnswer): boolean {
  return REFUSED.has(answer.status) || (answer.status === 503 && header(answer, 'retry-after') !== undefined);
}

/**
 * Sends `concurrency` requests with one key, truly at once, `rounds` times, and counts what a
 * client would see: distinct originals (a handler that ran twice returns two different bodies),
 * hangs and statuses. Works black-box against any endpoint.
 */
export async function raceCase(target: RaceTarget, options: RaceOptions = {}): Promise<RaceResult> {
  const concurrency = options.concurrency ?? 100;
  const rounds = options.rounds ?? 1;
  if (!Number.isSafeInteger(concurrency) || concurrency < 2) throw new CheckConfigError(`concurrency: expected an integer >= 2, got ${concurrency}`);
  if (!Number.isSafeInteger(rounds) || rounds < 1) throw new CheckConfigError(`rounds: expected an integer >= 1, got ${rounds}`);
  const url = new URL(target.url);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new CheckConfigError(`url: only http: and https: can be checked, got ${url.protocol}`);
  const started = performance.now();
  const statuses: Record<string, number> = {};
  const perRound: RaceRound[] = [];
  // The first round finds out which barrier the target allows; the others reuse it.
  let barrier: Barrier | undefined;
  for (let round = 0; round < rounds; round++) {
    const result = await raceRound(target, url, concurrency, statuses, barrier);
    barrier = result.barrier;
    perRound.push(result.round);
  }
  return {
    rounds,
    concurrency,
    doubleExecutions: perRound.reduce((sum, r) => sum + Math.max(0, r.distinctOriginals - 1), 0),
    hangs: perRound.reduce((sum, r) => sum + r.hangs, 0),
    errors: perRound.reduce((sum, r) => sum + r.errors, 0),
    tooLarge: perRound.reduce((sum, r) => sum + r.tooLarge, 0),
    statuses,
    perRound,
    barrier: barrier ?? 'written',
    ms: Math.round(performance.now() - started),
  };
}

/**
 * Does the target answer `Expect: 100-continue`? Yes as soon as one request gets its 100; no when
 * none has within a second of all being written (curl waits as long), or all ended otherwise.
 */
async function answersContinue(held: readonly HeldRequest[]): Promise<Barrier> {
  let timer: NodeJS.Timeout | undefined;
  const any = Promise.any(
    held.map((h) =>
      h.continued.then(() => {
        if (!h.gotContinue) throw new Error('ended without 100 Continue');
      }),
    ),
  ).then(() => '100-continue' as const, () => 'written' as const);
  const late = new Promise<Barrier>((resolve) => (timer = setTimeout(() => resolve('written'), 1_000)));
  try {
    return await Promise.race([any, late]);
  } finally {
    clearTimeout(timer);
  }
}

function raceRequest(target: RaceTarget, url: URL): HttpRequest {
  const key = freshKey();
  return {
    method: target.method ?? 'POST',
    url,
    headers: { 'content-type': 'application/json', ...target.headers, [target.keyHeader ?? 'Idempotency-Key']: key },
    // at least one byte: the barrier holds the last one back
    body: render(target.body ?? DEFAULT_BODY, key) || ' ',
  };
}

async function raceRound(
  target: RaceTarget,
  url: URL,
  concurrency: number,
  statuses: Record<string, number>,
  known: Barrier | undefined,
): Promise<{ round: RaceRound; barrier: Barrier }> {
  const timeoutMs = target.timeoutMs ?? 10_000;
  const maxResponseBytes = target.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  const request = raceRequest(target, url);
  const key = String(request.headers[target.keyHeader ?? 'Idempotency-Key']);
  // One socket per request (no pooling: a pooled socket would queue a request behind another).
  const agent = new (url.protocol === 'https:' ? https.Agent : http.Agent)({ keepAlive: false, maxSockets: concurrency });
  try {
    const expectContinue = known !== 'written';
    const held = Array.from({ length: concurrency }, () => open(request, { timeoutMs, agent, expectContinue, maxResponseBytes }));
    // The barrier: every request written (or failed) and, where the target answers 100 Continue,
    // every head acknowledged, before any last byte goes out. Each request's timeout bounds this.
    await Promise.all(held.map((h) => h.written));
    const barrier = known ?? (await answersContinue(held));
    if (barrier === '100-continue') await Promise.all(held.map((h) => h.continued));
    for (const h of held) void h.release();
    const settled = await Promise.allSettled(held.map((h) => h.answer));
    const answers: HttpAnswer[] = [];
    let hangs = 0;
    let errors = 0;
    let tooLarge = 0;
    for (const result of settled) {
      if (result.status === 'fulfilled') {
        answers.push(result.value);
        statuses[result.value.status] = (statuses[result.value.status] ?? 0) + 1;
      } else if (result.reason instanceof CheckRequestError && result.reason.kind === 'too-large') {
        tooLarge++;
        statuses['too-large'] = (statuses['too-large'] ?? 0) + 1;
      } else if (result.reason instanceof CheckRequestError && result.reason.kind === 'timeout') {
        hangs++;
        statuses.timeout = (statuses.timeout ?? 0) + 1;
      } else {
        errors++;
        statuses.error = (statuses.error ?? 0) + 1;
      }
    }
    const originals = answers.filter((a) => !refused(a));
    const distinct = new Map<string, HttpAnswer>();
    for (const a of originals) distinct.set(`${a.status} ${a.body}`, a);
    // After the round, the key must still replay one of the answers given (normally the only one).
    let laterReplayMatches: boolean | undefined;
    if (distinct.size > 0) {
      try {
        const later = await send(request, { timeoutMs, maxResponseBytes });
        laterReplayMatches = distinct.has(`${later.status} ${later.body}`);
      } catch (error) {
        // An answer too large to read is reported as that, not as a replay that does not match.
        if (error instanceof CheckRequestError && error.kind === 'too-large') tooLarge++;
        else laterReplayMatches = false;
      }
    }
    const round: RaceRound = {
      key,
      distinctOriginals: distinct.size,
      unmarked: originals.filter((a) => header(a, 'idempotent-replayed') !== 'true').length,
      refused: answers.length - originals.length,
      hangs,
      errors,
      tooLarge,
      early: held.filter((h) => h.early).length,
      laterReplayMatches,
      samples: [...distinct.keys()].slice(0, 3).map((s) => (s.length > 160 ? `${s.slice(0, 157)}...` : s)),
    };
    return { round, barrier };
  } finally {
    agent.destroy();
  }
}
