/**
 * maxResponseBytes (--max-response-bytes): the check holds every answer in memory to compare it,
 * so it reads at most that much of one. A larger answer fails its request with a message naming
 * the limit, at once, instead of being read until the timeout and reported as "never answered".
 */
import { afterEach, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/check/config.js';
import { TargetUnreachableError, raceCase, runCheck } from '../../src/check/index.js';
import type { StreamingServer } from '../client/servers.js';
import { streamingServer } from '../client/servers.js';
import { runCli } from './cli.js';

let target: StreamingServer | undefined;
afterEach(async () => {
  await target?.close();
  target = undefined;
});

describe('an endless answer', () => {
  it('to the baseline: the target cannot be checked, and the error names the limit; the connection is closed', async () => {
    target = await streamingServer();
    const error = await runCheck({ url: target.url, maxResponseBytes: 100_000, only: ['replay'] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TargetUnreachableError);
    expect((error as Error).message).toMatch(/larger than the response limit of 100000 bytes \(maxResponseBytes, --max-response-bytes\): reading stopped after \d+ bytes/);
    expect((error as Error).message).not.toMatch(/never answered/);
    expect(await target.ended()).toBe('client');
  });

  it('with the default limit (10 MiB)', async () => {
    target = await streamingServer();
    await expect(runCheck({ url: target.url, only: ['replay'] })).rejects.toThrow(/larger than the response limit of 10485760 bytes/);
    expect(await target.ended()).toBe('client');
    expect(resolveConfig({ url: 'http://127.0.0.1:1/' }).maxResponseBytes).toBe(10 * 1024 * 1024);
  });

  it('the CLI: exit 2 and an error line naming --max-response-bytes', async () => {
    target = await streamingServer();
    const run = await runCli(['check', target.url, '--max-response-bytes', '100000', '--only', 'replay']);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^idemkit check: cannot check POST .*: the answer \(status 200\) is larger than the response limit of 100000 bytes \(maxResponseBytes, --max-response-bytes\)/);
    expect(run.stderr).not.toMatch(/never answered/);
  }, 30_000);

  it('a declared Content-Length over the limit fails without reading', async () => {
    target = await streamingServer({ length: 100_001 });
    await expect(runCheck({ url: target.url, maxResponseBytes: 100_000, only: ['replay'] })).rejects.toThrow(/it declares Content-Length 100001/);
  });

  it('after a normal baseline: the case FAILs with the limit in its message', async () => {
    target = await streamingServer({ first: 1 });
    const report = await runCheck({ url: target.url, maxResponseBytes: 100_000, only: ['replay'] });
    expect(report.cases).toHaveLength(1);
    expect(report.cases[0]).toMatchObject({ id: 'replay', verdict: 'FAIL', message: expect.stringMatching(/larger than the response limit of 100000 bytes/) });
    expect(report.ok).toBe(false);
  });

  it('in the race: counted as too large, and the race FAILs saying so', async () => {
    target = await streamingServer({ first: 1 });
    const report = await runCheck({ url: target.url, maxResponseBytes: 100_000, concurrency: 4, only: ['race'] });
    expect(report.cases[0]).toMatchObject({
      id: 'race',
      verdict: 'FAIL',
      message: '4 answer(s) were larger than the response limit of 100000 bytes (maxResponseBytes, --max-response-bytes) and were not read to the end',
    });
    const result = await raceCase({ url: target.url, maxResponseBytes: 100_000 }, { concurrency: 3 });
    expect(result).toMatchObject({ tooLarge: 3, hangs: 0, errors: 0, statuses: { 'too-large': 3 } });
  });

  it('the config field and the flag are validated', async () => {
    expect(() => resolveConfig({ url: 'http://127.0.0.1:1/', maxResponseBytes: 0 })).toThrow(/maxResponseBytes: expected an integer from 1/);
    const run = await runCli(['check', 'http://127.0.0.1:1/', '--max-response-bytes', '10MB']);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--max-response-bytes: expected a whole number, got "10MB"');
  }, 30_000);
});
