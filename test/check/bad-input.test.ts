/**
 * Bad input never hangs: an unreachable URL, a non-HTTP URL, a server that accepts and never
 * answers, and bad flags each end with a clear message and exit code 2. (The bound on time is
 * the per-request --timeout; the test's own timeout would catch a hang.)
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseCheckArgs } from '../../src/check/args.js';
import { CASE_IDS, CheckConfigError, runCheck, TargetUnreachableError } from '../../src/check/index.js';
import { startHanging, startHangingAfterFirst } from './broken-servers.js';
import { runCli } from './cli.js';
import { freePort as closedPort } from '../support/ports.js';

describe('the CLI', () => {
  it('an unreachable URL: connection refused, exit 2', async () => {
    const run = await runCli(['check', `http://127.0.0.1:${await closedPort()}/charges`]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/connection refused .*is the server running\?/);
    expect(run.stdout).toBe('');
  });

  it('a non-HTTP URL is refused before any request, exit 2', async () => {
    const run = await runCli(['check', 'ftp://127.0.0.1/charges']);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('only http:// and https:// endpoints can be checked, got ftp://');
  });

  it('a server that accepts and never answers: a bounded run, exit 2', async () => {
    const hanging = await startHanging();
    try {
      const run = await runCli(['check', hanging.url, '--timeout', '500ms']);
      expect(run.code).toBe(2);
      expect(run.stderr).toMatch(/no answer within 500 ms .*the server accepted the connection but never answered/);
    } finally {
      await hanging.close();
    }
  });

  it('a TCP server that does not speak HTTP: exit 2', async () => {
    const server = createServer((socket) => socket.end('SSH-2.0-OpenSSH_9.6\r\n'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const run = await runCli(['check', `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, '--timeout', '2s']);
      expect(run.code).toBe(2);
      expect(run.stderr).toMatch(/not HTTP\/1\.1|parse error|HPE_/i);
    } finally {
      server.close();
    }
  });

  it('usage errors: exit 2 with the reason', async () => {
    const noUrl = await runCli(['check']);
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toContain('the endpoint URL is required');
    const badFlag = await runCli(['check', 'http://127.0.0.1:1/x', '--bogus']);
    expect(badFlag.code).toBe(2);
    expect(badFlag.stderr).toMatch(/Unknown option '--bogus'/);
    const help = await runCli(['check', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('-H, --header');
  });
});

describe('runCheck and the flags', () => {
  it('a server that stops answering mid-run: each case FAILs on its timeout and the deadline ends the run', async () => {
    const target = await startHangingAfterFirst();
    try {
      const report = await runCheck({ url: target.url, timeoutMs: 200, deadlineMs: 1500, concurrency: 10 });
      expect(report.ok).toBe(false);
      expect(report.cases[0]).toMatchObject({ id: 'replay', verdict: 'FAIL', message: expect.stringMatching(/no answer within 200 ms/) });
      // Every case is accounted for: failed on a timeout, or skipped once the deadline passed.
      expect(report.cases.map((c) => c.id)).toEqual(CASE_IDS);
      expect(report.cases.filter((c) => c.verdict === 'SKIP').every((c) => c.message === 'the run deadline had passed' || c.tier === 'PROFILE')).toBe(true);
      expect(report.cases.some((c) => c.message === 'the run deadline had passed')).toBe(true);
    } finally {
      await target.close();
    }
  });

  const dir = mkdtempSync(join(tmpdir(), 'idemkit-check-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('throws typed errors: CheckConfigError for a bad URL or case id, TargetUnreachableError for a refused port', async () => {
    await expect(runCheck({ url: 'ftp://x/' })).rejects.toBeInstanceOf(CheckConfigError);
    await expect(runCheck({ url: 'http://127.0.0.1:1/', only: ['nope'] })).rejects.toThrow(/unknown case "nope"/);
    await expect(runCheck({ url: 'http://127.0.0.1:1/', concurrency: 1 })).rejects.toThrow(/concurrency: expected an integer from 2/);
    await expect(runCheck({ url: `http://127.0.0.1:${await closedPort()}/` })).rejects.toBeInstanceOf(TargetUnreachableError);
  });

  it('curl flags, and a YAML file under them', () => {
    const file = join(dir, 'check.yaml');
    writeFileSync(file, 'url: http://127.0.0.1:3000/charges\nheaders:\n  - "authorization: Bearer file"\n  - "x-tenant: a"\nconcurrency: 20\nleaseMs: 300\n');
    const { config } = parseCheckArgs(['-c', file, '-X', 'patch', '-H', 'Authorization: Bearer t1', '-d', '{"n":"{{n}}"}', '--timeout', '3', '-n', '50', '--skip', 'race,scope']);
    expect(config).toEqual({
      url: 'http://127.0.0.1:3000/charges',
      headers: { authorization: 'Bearer t1', 'x-tenant': 'a' },
      method: 'patch',
      body: '{"n":"{{n}}"}',
      concurrency: 50,
      leaseMs: 300,
      timeoutMs: 3000,
      skip: ['race', 'scope'],
    });
    const json = join(dir, 'check.json');
    writeFileSync(json, JSON.stringify({ url: 'http://h/x', otherHeaders: { authorization: 'Bearer b' }, bogus: 1 }));
    expect(() => parseCheckArgs(['-c', json])).not.toThrow();
    return expect(runCheck(parseCheckArgs(['-c', json]).config)).rejects.toThrow(/unknown config field "bogus"/);
  });

  it('a misspelt config field is refused with the one meant', () =>
    expect(runCheck({ url: 'http://h/x', concurency: 5 } as never)).rejects.toThrow(/unknown config field "concurency"; did you mean "concurrency"\?/));

  it('-u is basic auth; a header line without a colon is refused', () => {
    expect(parseCheckArgs(['http://h/x', '-u', 'ann:secret']).config.headers).toEqual({ authorization: `Basic ${Buffer.from('ann:secret').toString('base64')}` });
    expect(() => parseCheckArgs(['http://h/x', '-H', 'no colon'])).toThrow(/expected "Name: value"/);
  });
});
