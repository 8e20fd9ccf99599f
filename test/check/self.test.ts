/**
 * The check proves itself: it passes our own middleware and FAILs each deliberately broken
 * server on the case for its fault, with a message that says what went wrong.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
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

  it('in-flight-mismatch: a retry that overtakes the original is the execution; the different body is sent while it runs', async () => {
    // The original waits 150 ms at the door, the first same-body retry claims the key and runs
    // 300 ms, the original gets 409. Waiting for that retry before sending the different body
    // would see it answered last (a WARN the CI once hit under load).
    const overtaken = await startCorrect({ delayMs: 300, overtakeMs: 150 });
    try {
      const report = await runCheck({ url: overtaken.url, headers: auth, only: ['in-flight-mismatch'] });
      const result = byId(report, 'in-flight-mismatch');
      expect(result.evidence[0]).toMatch(/^original → 409 /);
      expect(result).toMatchObject({ verdict: 'PASS' });
    } finally {
      await overtaken.close();
    }
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

// In another process: in this one, the server could not read a head while the client code runs.
const COUNTING_SERVER = `
let heads = 0;
const endsAt = [];
const server = require('node:http').createServer((req, res) => {
  if (req.method === 'GET') return res.end(JSON.stringify({ heads, endsAt }));
  heads++;
  req.resume();
  req.on('end', () => {
    endsAt.push(heads);
    res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: require('node:crypto').randomUUID() }));
  });
});
server.listen(0, '127.0.0.1', () => console.log('http://127.0.0.1:' + server.address().port + '/'));`;

it('the race barrier: the server has every request\'s head before any body is complete', async () => {
  // The server notes, as each body completes, how many heads it has parsed.
  const child = spawn(process.execPath, ['-e', COUNTING_SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.once('data', (chunk: Buffer) => resolve(chunk.toString().trim()));
      child.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
    });
    const result = await raceCase({ url }, { concurrency: 60 });
    const stats = (await (await fetch(url)).json()) as { heads: number; endsAt: number[] };
    expect(result.barrier).toBe('100-continue');
    // The first body completed when all 60 heads were in.
    expect(stats.endsAt[0]).toBe(60);
    expect(result.perRound[0]!.early).toBe(0);
    // This server has no idempotency at all: every request ran (and the later request too).
    expect(result.doubleExecutions).toBe(59);
    expect(stats.heads).toBe(61);
  } finally {
    child.kill('SIGKILL');
  }
});

it('the race barrier against a server that never answers 100 Continue: every request written, then released', async () => {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: randomUUID() })));
  });
  // With a checkContinue listener node sends no 100 by itself; this one just handles the request.
  server.on('checkContinue', (req, res) => server.emit('request', req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const result = await raceCase({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/` }, { concurrency: 20, rounds: 2 });
    expect(result.barrier).toBe('written');
    expect(result).toMatchObject({ doubleExecutions: 38, hangs: 0, errors: 0, statuses: { '201': 40 } });
  } finally {
    server.close();
  }
});

const faults: Array<[Fault, string, RegExp]> = [
  ['runs-twice', 'replay', /different body: the handler ran again/],
  ['mismatch-200', 'mismatch', /different body with a used key was executed \(200\); expected 422/],
  ['no-replay-header', 'replay-header', /no `Idempotent-Replayed: true`/],
  ['no-lock', 'race', /distinct original responses for one key: the handler ran \d+ times/],
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
    if (fault === 'mismatch-200') {
      expect(byId(report, 'in-flight-mismatch').verdict).toBe('FAIL');
    }
    // Only the fault fails: everything else about the server is right.
    // (A handler that runs on every retry also breaks every case built on a replay; the race and
    // in-flight-mismatch catch it only when one of their retries arrives after the original
    // finished, which a slow machine makes likely. Without a lock, a retry that overlaps the
    // original also runs, which in-flight-mismatch sees when it overlaps.)
    const optional: Record<Fault, string[]> = {
      'runs-twice': ['race', 'in-flight-mismatch'],
      'mismatch-200': [],
      'no-replay-header': [],
      'no-lock': ['in-flight-mismatch'],
    };
    const expected = {
      'runs-twice': ['mismatch-keeps-original', 'replay', 'sf-string'],
      'mismatch-200': ['in-flight-mismatch', 'mismatch'],
      'no-replay-header': ['replay-header'],
      'no-lock': ['race'],
    }[fault];
    const failed = report.cases.filter((c) => c.verdict === 'FAIL').map((c) => c.id);
    expect(failed.filter((id) => !optional[fault].includes(id)).sort()).toEqual(expected);
    const inFlight = byId(report, 'in-flight-mismatch');
    if (fault === 'runs-twice' && inFlight.verdict === 'FAIL') {
      // When it fails here, it is for the fault and says so.
      expect(inFlight.message).toMatch(/same key and body were both executed/);
    }
  }, 60_000);

  it('the CLI prints the FAIL row with its evidence and exits 1', async () => {
    const run = await runCli(['check', target.url, '-H', 'authorization: Bearer t1', '-n', '20', '--no-color']);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(new RegExp(`FAIL\\s+(MUST|SHOULD)\\s+${caseId}\\s+`));
    expect(run.stdout).toMatch(message);
    expect(run.stdout).toContain('FAILED');
  }, 30_000);
});

it('a 503 with Retry-After is a refusal (nothing ran), a bare 503 an original answer', async () => {
  // The first request of each key gets its 201; the others a 503, with or without Retry-After.
  let retryAfter = true;
  const seen = new Set<string>();
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const key = String(req.headers['idempotency-key']);
      if (!seen.has(key)) {
        seen.add(key);
        return res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: key }));
      }
      res.writeHead(503, { 'content-type': 'application/problem+json', ...(retryAfter ? { 'retry-after': '1' } : {}) }).end('{"status":503}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    const refusedRound = await raceCase({ url }, { concurrency: 10 });
    expect([refusedRound.doubleExecutions, refusedRound.perRound[0]!.refused]).toEqual([0, 9]);
    retryAfter = false;
    const bare = await raceCase({ url }, { concurrency: 10 });
    expect(bare.doubleExecutions).toBe(1);
  } finally {
    server.close();
  }
});
