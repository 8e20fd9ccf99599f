/**
 * The check proves itself: it passes our own middleware and FAILs each deliberately broken
 * server on the case for its fault, with a message that says what went wrong.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CheckReport } from '../../src/check/index.js';
import { raceCase, runCheck } from '../../src/check/index.js';
import type { Fault } from './broken-servers.js';
import { startBroken } from './broken-servers.js';
import { runCli } from './cli.js';
import type { Running } from './servers.js';
import { startCorrect } from './servers.js';

const auth = { authorization: 'Bearer t1' };
const byId = (report: CheckReport, id: string) => report.cases.find((c) => c.id === id)!;

describe('against our own middleware (Fastify, memory store)', () => {
  let target: Running;
  beforeAll(async () => {
    // A handler that takes 200 ms, so the in-flight cases see the original still running.
    target = await startCorrect({ delayMs: 200 });
  });
  afterAll(() => target.close());

  it('passes every case it can run, PROFILE included', async () => {
    const report = await runCheck({
      url: target.url,
      headers: auth,
      otherHeaders: { authorization: 'Bearer t2' },
      errorBody: '{"fail":true}',
      strict: true,
    });
    const notPassed = report.cases.filter((c) => c.verdict !== 'PASS').map((c) => [c.id, c.verdict, c.message, ...c.evidence].join(' | '));
    expect(notPassed).toEqual(['lease | SKIP | pass --lease-ms N (the target\'s configured short lease) to run']);
    expect(report.ok).toBe(true);
    expect(report.cases.map((c) => c.id)).toContain('race');
  }, 60_000);

  it('raceCase: 100 requests released together, one execution, the rest 409 or replays', async () => {
    const result = await raceCase({ url: target.url, headers: auth }, { concurrency: 100, rounds: 2 });
    expect(result).toMatchObject({ rounds: 2, concurrency: 100, doubleExecutions: 0, hangs: 0, errors: 0 });
    expect(Object.keys(result.statuses).sort()).toEqual(expect.arrayContaining(['201']));
    expect(Object.keys(result.statuses).every((s) => s === '201' || s === '409')).toBe(true);
    // The barrier held: no request was answered before all of them were written.
    expect(result.perRound.every((r) => r.early === 0 && r.distinctOriginals === 1 && r.laterReplayMatches === true)).toBe(true);
    // With a 200 ms handler and a true race, most of the 100 find the first still in flight.
    expect(result.statuses['409']).toBeGreaterThan(0);
  });

  it('the lease case: past 2x a 100 ms lease, the live original keeps its key', async () => {
    const slow = await startCorrect({ delayMs: 500, leaseMs: 100 });
    try {
      const report = await runCheck({ url: slow.url, headers: auth, leaseMs: 100, only: ['lease'] });
      expect(byId(report, 'lease')).toMatchObject({ verdict: 'PASS' });
    } finally {
      await slow.close();
    }
  });
});

const faults: Array<[Fault, string, RegExp]> = [
  ['runs-twice', 'replay', /different body: the handler ran again/],
  ['mismatch-200', 'mismatch', /different body with a used key was executed \(200\); expected 422/],
  ['no-replay-header', 'replay-header', /no `Idempotent-Replayed: true`/],
];

describe.each(faults)('a server that %s', (fault, caseId, message) => {
  let target: Running;
  beforeAll(async () => {
    target = await startBroken(fault);
  });
  afterAll(() => target.close());

  it(`FAILs the ${caseId} case with a useful message`, async () => {
    const report = await runCheck({ url: target.url, headers: auth, concurrency: 50 });
    expect(report.ok).toBe(false);
    const result = byId(report, caseId);
    expect(result.verdict).toBe('FAIL');
    expect(result.message).toMatch(message);
    expect(result.evidence.length).toBeGreaterThan(0);
    if (fault === 'runs-twice') {
      expect(byId(report, 'race')).toMatchObject({ verdict: 'FAIL', message: expect.stringMatching(/distinct original responses for one key: the handler ran \d+ times/) });
    }
    if (fault === 'mismatch-200') {
      expect(byId(report, 'in-flight-mismatch').verdict).toBe('FAIL');
    }
    // Only the fault fails: everything else about the server is right.
    // (A handler that runs on every retry also breaks every case built on a replay.)
    const expected = {
      'runs-twice': ['mismatch-keeps-original', 'race', 'replay', 'sf-string'],
      'mismatch-200': ['in-flight-mismatch', 'mismatch'],
      'no-replay-header': ['replay-header'],
    }[fault];
    expect(report.cases.filter((c) => c.verdict === 'FAIL').map((c) => c.id).sort()).toEqual(expected);
  }, 60_000);

  it('the CLI prints the FAIL row with its evidence and exits 1', async () => {
    const run = await runCli(['check', target.url, '-H', 'authorization: Bearer t1', '-n', '20', '--no-color']);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(new RegExp(`FAIL\\s+(MUST|SHOULD)\\s+${caseId}\\s+`));
    expect(run.stdout).toMatch(message);
    expect(run.stdout).toContain('FAILED');
  }, 30_000);
});
