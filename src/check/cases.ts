// The cases, each with its tier: MUST (what idempotency means: one execution, one answer per
// key), SHOULD (draft-07's SHOULDs and the seed's acceptance cases), PROFILE (the recommended
// profile, idemkit's and Stripe's defaults: the draft leaves them open, so they only WARN).
import type { CheckContext } from './context.js';
import { describe, is2xx, replayed, sameResponse } from './context.js';
import type { HttpAnswer } from './http.js';
import { header } from './http.js';
import { raceCase } from './race.js';
import { render } from './template.js';

export type Tier = 'MUST' | 'SHOULD' | 'PROFILE';

export interface Outcome {
  readonly verdict: 'pass' | 'fail' | 'warn' | 'skip';
  readonly message: string;
  readonly evidence?: readonly string[];
}

export interface CheckCase {
  readonly id: string;
  readonly tier: Tier;
  readonly title: string;
  run(ctx: CheckContext): Promise<Outcome>;
}

const pass = (message: string, evidence?: readonly string[]): Outcome => ({ verdict: 'pass', message, evidence });
const fail = (message: string, evidence?: readonly string[]): Outcome => ({ verdict: 'fail', message, evidence });
const warn = (message: string, evidence?: readonly string[]): Outcome => ({ verdict: 'warn', message, evidence });
const skip = (message: string): Outcome => ({ verdict: 'skip', message });

/** A rejection the target should give (400, 413, 422): 2xx means it executed what it should refuse. */
function expectStatus(expected: number, answer: HttpAnswer, what: string, evidence: string[]): Outcome {
  if (answer.status === expected) return pass(`${what}: ${expected}`, evidence);
  if (is2xx(answer)) return fail(`${what} was executed (${answer.status}); expected ${expected}`, evidence);
  return fail(`${what}: expected ${expected}, got ${answer.status}`, evidence);
}

/** Sends the same request twice and compares; the building block of several cases. `body` is made from the key (default: the configured body). */
async function twice(ctx: CheckContext, spec: { method?: string; url?: URL; body?: (key: string) => string } = {}) {
  const { body: bodyFor = (k: string) => ctx.body(k), ...request } = spec;
  const key = ctx.key();
  const body = bodyFor(key);
  const first = await ctx.send({ ...request, key, body });
  const second = await ctx.send({ ...request, key, body });
  return { key, body, first, second, evidence: [`1st → ${describe(first)}`, `2nd → ${describe(second)}`] };
}

function notReplayed(first: HttpAnswer, second: HttpAnswer, evidence: string[]): Outcome {
  if (second.status === 409) return fail(`the retry got 409 after the original had answered: the key stays "in progress"`, evidence);
  if (second.status !== first.status) return fail(`the retry got ${second.status}, the original ${first.status}`, evidence);
  return fail('the retry got a different body: the handler ran again', evidence);
}

const keySyntax = (id: string, title: string, what: string, value: (key: string) => string | readonly string[]): CheckCase => ({
  id,
  tier: 'PROFILE',
  title,
  async run(ctx) {
    const key = value(ctx.key());
    const answer = await ctx.send({ key, body: ctx.body() });
    return expectStatus(400, answer, what, [`${typeof key === 'string' ? JSON.stringify(key.length > 40 ? `${key.slice(0, 37)}...` : key) : key.map((k) => JSON.stringify(k)).join(' + ')} → ${describe(answer)}`]);
  },
});

const wait = (ms: number) => new Promise<'timer'>((resolve) => setTimeout(() => resolve('timer'), ms));

export const CASES: readonly CheckCase[] = [
  {
    id: 'replay',
    tier: 'MUST',
    title: 'same key, same body: the same response',
    async run(ctx) {
      const { first, second, evidence } = await twice(ctx);
      return sameResponse(first, second) ? pass('the retry got the original response', evidence) : notReplayed(first, second, evidence);
    },
  },
  {
    id: 'replay-header',
    tier: 'SHOULD',
    title: 'a replay says Idempotent-Replayed: true',
    async run(ctx) {
      const { first, second, evidence } = await twice(ctx);
      if (!sameResponse(first, second)) return skip('no replay to inspect (see the replay case)');
      if (replayed(first)) return fail('the original answer is marked Idempotent-Replayed', evidence);
      if (!replayed(second)) {
        return fail(`the replay has no \`Idempotent-Replayed: true\` (got ${JSON.stringify(header(second, 'idempotent-replayed') ?? null)}): a client cannot tell a replay from a new execution`, evidence);
      }
      return pass('the replay is marked, the original is not', evidence);
    },
  },
  {
    id: 'mismatch',
    tier: 'SHOULD',
    title: 'same key, different body: 422',
    async run(ctx) {
      const key = ctx.key();
      const body = ctx.body(key);
      const first = await ctx.send({ key, body });
      const other = ctx.otherBody(body, key);
      const second = await ctx.send({ key, body: other });
      return expectStatus(422, second, 'a different body with a used key', [`${body} → ${describe(first)}`, `${other} → ${describe(second)}`]);
    },
  },
  {
    id: 'mismatch-keeps-original',
    tier: 'MUST',
    title: 'after a mismatch the original still replays',
    async run(ctx) {
      const key = ctx.key();
      const body = ctx.body(key);
      const first = await ctx.send({ key, body });
      const mismatch = await ctx.send({ key, body: ctx.otherBody(body, key) });
      const again = await ctx.send({ key, body });
      const evidence = [`original → ${describe(first)}`, `mismatch → ${describe(mismatch)}`, `original again → ${describe(again)}`];
      return sameResponse(first, again) ? pass('the record was untouched by the mismatch', evidence) : fail('after a request with a different body, the key no longer replays the original', evidence);
    },
  },
  {
    id: 'missing-key',
    tier: 'SHOULD',
    title: 'no key: 400',
    async run(ctx) {
      if (!ctx.config.keyRequired) return skip('the key is optional on this endpoint (keyRequired: false)');
      const answer = await ctx.send({ key: null, body: ctx.body() });
      return expectStatus(400, answer, 'a request without a key', [`no key → ${describe(answer)}`]);
    },
  },
  {
    id: 'malformed-key',
    tier: 'SHOULD',
    title: 'a malformed key (unterminated sf-string): 400',
    async run(ctx) {
      const key = `"${ctx.key()}`;
      const answer = await ctx.send({ key, body: ctx.body() });
      return expectStatus(400, answer, 'a malformed key', [`${key} → ${describe(answer)}`]);
    },
  },
  {
    id: 'sf-string',
    tier: 'SHOULD',
    title: 'the quoted sf-string key and the bare key are one key',
    async run(ctx) {
      const key = ctx.key();
      const body = ctx.body(key);
      const bare = await ctx.send({ key, body });
      const quoted = await ctx.send({ key: `"${key}"`, body });
      const evidence = [`${key} → ${describe(bare)}`, `"${key}" → ${describe(quoted)}`];
      if (sameResponse(bare, quoted)) return pass('the quoted key replayed the bare key\'s response', evidence);
      if (quoted.status === 400) return fail('the quoted sf-string form of the key was rejected', evidence);
      return fail('the quoted key was treated as another key (the handler ran again)', evidence);
    },
  },
  {
    id: 'race',
    tier: 'MUST',
    title: 'N requests at once, one key: one execution',
    async run(ctx) {
      const c = ctx.config;
      const result = await raceCase(
        { url: c.url, method: c.method, headers: c.headers, body: c.body, keyHeader: c.keyHeader, timeoutMs: c.timeoutMs, maxResponseBytes: c.maxResponseBytes },
        { concurrency: c.concurrency, rounds: c.rounds },
      );
      const statuses = Object.entries(result.statuses).map(([s, n]) => `${s}×${n}`).join(' ');
      const evidence = [`${result.rounds} round(s) of ${result.concurrency}, released together (barrier: ${result.barrier === '100-continue' ? 'every head acknowledged by 100 Continue' : 'every request written'}): ${statuses}`];
      for (const round of result.perRound) if (round.distinctOriginals > 1) evidence.push(...round.samples.map((s) => `  distinct original: ${s}`));
      if (result.doubleExecutions > 0) {
        const worst = Math.max(...result.perRound.map((r) => r.distinctOriginals));
        return fail(`${worst} distinct original responses for one key: the handler ran ${worst} times`, evidence);
      }
      if (result.tooLarge > 0) {
        return fail(`${result.tooLarge} answer(s) were larger than the response limit of ${c.maxResponseBytes} bytes (maxResponseBytes, --max-response-bytes) and were not read to the end`, evidence);
      }
      if (result.hangs > 0) return fail(`${result.hangs} request(s) got no answer within ${c.timeoutMs} ms`, evidence);
      if (result.errors > 0) return fail(`${result.errors} request(s) failed without an HTTP answer (connection reset?)`, evidence);
      const originalStatuses = new Set(result.perRound.map((r) => r.samples[0]?.split(' ')[0]));
      const unexpected = Object.keys(result.statuses).filter((s) => s !== '409' && s !== '429' && !originalStatuses.has(s));
      if (unexpected.length > 0) return fail(`unexpected statuses in the race: ${unexpected.join(', ')} (expected the original's, replays, or 409)`, evidence);
      if (result.perRound.some((r) => r.laterReplayMatches === false)) return fail('after the race, the key replays none of the answers the race got', evidence);
      if (result.perRound.some((r) => r.distinctOriginals === 0)) return fail('every request was refused: nobody executed', evidence);
      const unmarked = Math.max(...result.perRound.map((r) => r.unmarked));
      if (unmarked > 1) return warn(`one distinct response, but ${unmarked} answers not marked as replays: a handler with a deterministic answer may have run more than once`, evidence);
      const early = result.perRound.reduce((n, r) => n + r.early, 0);
      if (early > 0) evidence.push(`${early} answer(s) came before the barrier released the body`);
      return pass(`one original; the rest were replays or 409 (${result.ms} ms)`, evidence);
    },
  },
  {
    id: 'in-flight-mismatch',
    tier: 'SHOULD',
    title: 'a different body while the original is in flight: refused',
    async run(ctx) {
      const key = ctx.key();
      const body = ctx.body(key);
      const other = ctx.otherBody(body, key);
      // The original is on the wire, in one write on an open keep-alive connection, before the
      // first retry leaves (on a connection still to be opened): the server reads it first.
      const started = ctx.start({ key, body });
      await started.written;
      const original = started.answer;
      // A retry with the SAME body answers 409 exactly while the original runs: that is the
      // black-box proof it is in flight. Retry (at most 50 times) until one does, then send the
      // different body at once. A retry can overtake the original on its own connection: then
      // the ORIGINAL gets the 409 and that retry is the execution, still running; the different
      // body goes out then too, without waiting for it. Every answer to the same body is kept:
      // together they may hold one execution only.
      const settled = <T>(promise: Promise<T>) => promise.then(() => undefined, () => undefined);
      const retries: Array<Promise<HttpAnswer>> = [];
      let probe: HttpAnswer | undefined;
      let originalAnswer: HttpAnswer | undefined;
      let originalDone = false;
      void original.then((a) => (originalAnswer = a), () => {}).finally(() => (originalDone = true));
      for (let i = 0; i < 50 && !originalDone; i++) {
        const retry = ctx.send({ key, body });
        retries.push(retry);
        let retryAnswer: HttpAnswer | undefined;
        await Promise.race([settled(retry.then((a) => (retryAnswer = a))), settled(original)]);
        const busy = (a: HttpAnswer | undefined) => a !== undefined && (a.status === 409 || a.status === 429);
        if (busy(retryAnswer)) probe = retryAnswer;
        else if (busy(originalAnswer)) probe = originalAnswer;
        if (probe !== undefined) break;
        // Neither answered "in progress" yet: wait for this retry before the next one, so at
        // most one probe is open at a time.
        if (retryAnswer === undefined && !originalDone) await settled(retry);
      }
      const mismatch = ctx.send({ key, body: other });
      // One await for all of them, so a failure of one never leaves another's unobserved.
      const [sameBody, o, m] = await Promise.all([Promise.all(retries), original, mismatch]);
      const evidence = [
        `original → ${describe(o)}`,
        ...(probe ? [`same body, while it ran → ${describe(probe)}`] : []),
        `different body → ${describe(m)}`,
      ];
      const executed = [o, ...sameBody].filter(is2xx);
      const doubled = executed.find((a) => !sameResponse(a, executed[0]!));
      if (doubled) return fail('two requests with the same key and body were both executed', [...evidence, `same body → ${describe(doubled)}`]);
      const refused = (a: HttpAnswer) => a.status === 409 || a.status === 422;
      const winner = executed[0];
      if (winner && is2xx(m)) return fail('both the original body and a different body were executed with one key', evidence);
      if (!winner) {
        if (is2xx(m) && refused(o)) return warn(`not observed in flight: the different body arrived first and ran; the original got ${o.status}`, evidence);
        return fail(`expected one execution and a 409/422, got ${o.status} and ${m.status}`, evidence);
      }
      if (!refused(m)) return fail(`the different body got ${m.status}; expected 422 (or 409 while the original runs)`, evidence);
      const inFlight = (probe !== undefined || o.status === 409) && m.finishedAt < winner.finishedAt;
      if (!inFlight) {
        return warn(`not observed in flight: the original answered first (in ${Math.round(winner.finishedAt - winner.startedAt)} ms); a slower handler would show the in-flight answer`, evidence);
      }
      return pass(`refused with ${m.status} while the original ran`, evidence);
    },
  },
  {
    id: 'error-replay',
    tier: 'PROFILE',
    title: 'a 4xx/5xx first answer is replayed',
    async run(ctx) {
      const template = ctx.config.errorBody;
      if (template === undefined) return skip('pass --error-body with a body the handler answers with a 4xx/5xx');
      const { first, second, evidence } = await twice(ctx, { body: (key) => render(template, key) });
      if (first.status < 400) return warn(`--error-body did not produce an error (got ${first.status})`, evidence);
      if (!sameResponse(first, second)) return fail(`the ${first.status} was not replayed: the retry got another answer`, evidence);
      if (!replayed(second)) {
        return warn(`the same ${first.status} again, but not marked as a replay: either it is not stored, or it was refused before the handler ran (which is not stored, rightly)`, evidence);
      }
      return pass(`the ${first.status} was stored and replayed`, evidence);
    },
  },
  {
    id: 'get-passthrough',
    tier: 'PROFILE',
    title: 'GET passes through (no key needed, no replay)',
    async run(ctx) {
      const noKey = await ctx.send({ method: 'GET', key: null });
      const key = ctx.key();
      const first = await ctx.send({ method: 'GET', key });
      const second = await ctx.send({ method: 'GET', key });
      const evidence = [`GET without a key → ${describe(noKey)}`, `GET, key → ${describe(first)}`, `GET, same key → ${describe(second)}`];
      if (noKey.status === 400) return fail('GET without a key answered 400: GET is idempotent by definition and needs no key', evidence);
      if (replayed(second)) return fail('a GET was answered from the idempotency store', evidence);
      return pass(`GET passed through (${noKey.status} without a key; no replay)`, evidence);
    },
  },
  {
    id: 'patch',
    tier: 'PROFILE',
    title: 'PATCH is covered like POST',
    async run(ctx) {
      const { first, second, evidence } = await twice(ctx, { method: 'PATCH', url: ctx.config.patchUrl });
      if ([404, 405, 501].includes(first.status)) return skip(`no PATCH at ${ctx.config.patchUrl.href} (answered ${first.status}); set --patch-url`);
      if (!sameResponse(first, second)) return notReplayed(first, second, evidence);
      if (!replayed(second)) return fail('the PATCH replay has no `Idempotent-Replayed: true`', evidence);
      return pass('the PATCH retry replayed the original', evidence);
    },
  },
  {
    id: 'lease',
    tier: 'PROFILE',
    title: 'past the lease, a live original keeps its key',
    async run(ctx) {
      const leaseMs = ctx.config.leaseMs;
      if (leaseMs === undefined) return skip('pass --lease-ms N (the target\'s configured short lease) to run');
      const key = ctx.key();
      const body = ctx.body(key);
      const original = ctx.send({ key, body });
      const started = performance.now();
      if ((await Promise.race([original.then(() => 'answer' as const), wait(2 * leaseMs)])) === 'answer') {
        const o = await original;
        return skip(`the handler answered in ${Math.round(o.finishedAt - started)} ms, within 2× the lease (${2 * leaseMs} ms): give the target a slower handler to observe a request past its lease`);
      }
      const retry = await ctx.send({ key, body });
      const o = await original;
      const after = await ctx.send({ key, body });
      const evidence = [`original → ${describe(o)} after ${Math.round(o.finishedAt - started)} ms`, `retry at 2× the lease → ${describe(retry)}`, `retry after → ${describe(after)}`];
      if (is2xx(retry) && !sameResponse(retry, o)) return fail('a retry past the lease ran the handler again while the original was still running (the lease was not renewed)', evidence);
      if (!sameResponse(after, o)) return fail('after the original finished, the key does not replay it', evidence);
      if (retry.status !== 409 && !sameResponse(retry, o)) return fail(`the retry past the lease got ${retry.status}; expected 409 or the original`, evidence);
      return pass(`still in flight at 2× the lease, the original kept its key; a true take-over needs a dead owner (not observable black-box)`, evidence);
    },
  },
  keySyntax('key-non-ascii', 'a non-ASCII key: 400', 'a key with a non-ASCII character', (key) => `clé-${key}`),
  keySyntax('key-repeated', 'the key header twice: 400', 'a request with two key headers', (key) => [key, `${key}-2`]),
  keySyntax('key-too-long', 'a 256-character key: 400', 'a 256-character key', (key) => key.padEnd(256, 'x')),
  {
    id: 'set-cookie',
    tier: 'PROFILE',
    title: 'Set-Cookie is not replayed',
    async run(ctx) {
      const { first, second, evidence } = await twice(ctx);
      if (first.headers['set-cookie'] === undefined) return skip('the original answer sets no cookie');
      if (second.headers['set-cookie'] !== undefined) return fail('the replay carries Set-Cookie: a session would go to whoever holds the key', evidence);
      return pass('the replay carries no Set-Cookie', evidence);
    },
  },
  {
    id: 'scope',
    tier: 'SHOULD',
    title: 'two credentials, one key: two records',
    async run(ctx) {
      const otherHeaders = ctx.config.otherHeaders;
      if (otherHeaders === undefined) return skip('pass --other-header \'authorization: Bearer <another tenant>\' to run');
      const key = ctx.key();
      const body = ctx.body(key);
      const first = await ctx.send({ key, body });
      const other = await ctx.send({ key, body, headers: otherHeaders });
      const evidence = [`credential 1 → ${describe(first)}`, `credential 2, same key → ${describe(other)}`];
      if (other.status === 401 || other.status === 403) return warn(`the second credential was refused (${other.status}): check --other-header`, evidence);
      if (replayed(other) || (is2xx(other) && sameResponse(first, other))) return fail('the second credential got the first one\'s stored response: keys are not scoped to the credential', evidence);
      if (other.status === 409 || other.status === 422) return fail(`the second credential was refused as a reuse of the first's key (${other.status})`, evidence);
      return pass('each credential got its own execution', evidence);
    },
  },
  {
    id: 'body-too-large',
    tier: 'PROFILE',
    title: 'a body over the limit: 413',
    async run(ctx) {
      const size = ctx.config.maxBodyBytes + 1;
      const body = padded(ctx.body(), size);
      try {
        const answer = await ctx.send({ body });
        return expectStatus(413, answer, `a ${size}-byte body`, [`${size} bytes → ${describe(answer)}`]);
      } catch (error) {
        return warn(`the ${size}-byte body got no answer (${(error as Error).message}); expected 413`);
      }
    },
  },
];

/** The body grown to exactly `size` bytes: a JSON object gets a padding field, other text a tail. */
function padded(body: string, size: number): string {
  try {
    const value: unknown = JSON.parse(body);
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      const bare = JSON.stringify({ ...value, padding: '' });
      return JSON.stringify({ ...value, padding: 'x'.repeat(Math.max(0, size - Buffer.byteLength(bare))) });
    }
  } catch {
    // not JSON
  }
  return body + 'x'.repeat(Math.max(0, size - Buffer.byteLength(body)));
}
