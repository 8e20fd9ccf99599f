import type { CheckCase, Tier } from './cases.js';
import { CASES } from './cases.js';
import type { CheckConfig, ResolvedConfig } from './config.js';
import { resolveConfig } from './config.js';
import { CheckContext, describe, is2xx } from './context.js';
import { CheckConfigError, CheckRequestError, TargetUnreachableError } from './errors.js';

export type Verdict = 'PASS' | 'FAIL' | 'WARN' | 'SKIP';

export interface CaseResult {
  readonly id: string;
  readonly tier: Tier;
  readonly title: string;
  readonly verdict: Verdict;
  readonly message: string;
  /** What was sent and what came back: statuses, bodies. */
  readonly evidence: readonly string[];
  readonly ms: number;
}

export interface CheckReport {
  readonly url: string;
  readonly method: string;
  /** The settings the run used (for a CI artifact to say how hard it tested). */
  readonly settings: { readonly concurrency: number; readonly rounds: number; readonly timeoutMs: number; readonly leaseMs: number | undefined; readonly strict: boolean };
  /** No case FAILed: every MUST and SHOULD that ran passed (and every PROFILE case, under `strict`). */
  readonly ok: boolean;
  readonly summary: Readonly<Record<Verdict, number>>;
  readonly cases: readonly CaseResult[];
  readonly ms: number;
}

export interface RunOptions {
  /** Called as each case finishes (the CLI prints progress with it). */
  readonly onCase?: (result: CaseResult) => void;
}

/** The ids of every case, in the order they run. */
export const CASE_IDS: readonly string[] = CASES.map((c) => c.id);

/**
 * Runs every case against the endpoint and reports. Throws CheckConfigError for a bad config and
 * TargetUnreachableError when the target cannot be judged at all (nothing listens, not HTTP, no
 * answer, or the baseline request is not accepted); a failing target is a report with `ok: false`.
 */
export async function runCheck(config: CheckConfig, options: RunOptions = {}): Promise<CheckReport> {
  const resolved = resolveConfig(config);
  for (const id of [...(resolved.only ?? []), ...resolved.skip]) {
    if (!CASE_IDS.includes(id)) throw new CheckConfigError(`unknown case "${id}" (cases: ${CASE_IDS.join(', ')})`);
  }
  const started = performance.now();
  const deadline = started + resolved.deadlineMs;
  const ctx = new CheckContext(resolved);
  const results: CaseResult[] = [];
  try {
    await baseline(ctx, resolved);
    for (const c of CASES) {
      if (resolved.only && !resolved.only.includes(c.id)) continue;
      const result = await runCase(ctx, c, deadline);
      results.push(result);
      options.onCase?.(result);
    }
  } finally {
    ctx.close();
  }
  const summary: Record<Verdict, number> = { PASS: 0, FAIL: 0, WARN: 0, SKIP: 0 };
  for (const r of results) summary[r.verdict]++;
  const { concurrency, rounds, timeoutMs, leaseMs, strict } = resolved;
  return { url: resolved.url.href, method: resolved.method, settings: { concurrency, rounds, timeoutMs, leaseMs, strict }, ok: summary.FAIL === 0, summary, cases: results, ms: Math.round(performance.now() - started) };
}

/** One request with a fresh key: the target must answer it, and accept it, before anything is judged. */
async function baseline(ctx: CheckContext, config: ResolvedConfig): Promise<void> {
  const what = `${config.method} ${config.url.href}`;
  try {
    const answer = await ctx.send({ body: ctx.body() });
    if (!is2xx(answer)) {
      throw new TargetUnreachableError(
        `the baseline request (${what} with a fresh key and the body template) answered ${describe(answer)}; ` +
          'the check needs a request the endpoint accepts: set the method, headers (-H \'authorization: …\') and body (-d)',
      );
    }
  } catch (error) {
    if (!(error instanceof CheckRequestError)) throw error;
    const hint = error.kind === 'timeout' ? ' (the server accepted the connection but never answered)' : '';
    throw new TargetUnreachableError(`cannot check ${what}: ${error.message}${hint}`, { cause: error });
  }
}

async function runCase(ctx: CheckContext, c: CheckCase, deadline: number): Promise<CaseResult> {
  const started = performance.now();
  const base = { id: c.id, tier: c.tier, title: c.title };
  const config = ctx.config;
  const done = (verdict: Verdict, message: string, evidence: readonly string[] = []): CaseResult => ({ ...base, verdict, message, evidence, ms: Math.round(performance.now() - started) });
  if (config.skip.includes(c.id)) return done('SKIP', 'skipped (--skip)');
  const remaining = deadline - performance.now();
  if (remaining <= 0) return done('SKIP', 'the run deadline had passed');
  let timer: NodeJS.Timeout | undefined;
  const overtime = new Promise<'deadline'>((resolve) => (timer = setTimeout(() => resolve('deadline'), remaining)));
  try {
    const outcome = await Promise.race([c.run(ctx), overtime]);
    if (outcome === 'deadline') return done('FAIL', `the run deadline (${config.deadlineMs} ms) passed during this case`);
    const failing: Verdict = c.tier === 'PROFILE' && !config.strict ? 'WARN' : 'FAIL';
    const verdict: Verdict = { pass: 'PASS', fail: failing, warn: 'WARN', skip: 'SKIP' }[outcome.verdict] as Verdict;
    return done(verdict, outcome.message, outcome.evidence);
  } catch (error) {
    // A request that got no answer is the target's failure (a hang, a reset), not the checker's.
    const failing: Verdict = c.tier === 'PROFILE' && !config.strict ? 'WARN' : 'FAIL';
    if (error instanceof CheckRequestError) return done(failing, error.message);
    throw error;
  } finally {
    clearTimeout(timer);
  }
}
