/**
 * Issue 26 item 5, for `idemkit check`: what the target answered (bodies, problem titles and
 * details, header values, the baseline's refusal) reaches the operator's terminal with its
 * control characters escaped, in the table, in --json (still valid JSON, same values) and on stderr.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CheckReport } from '../../src/check/index.js';
import { formatReport } from '../../src/check/index.js';
import { HOSTILE, startHostile } from './broken-servers.js';
import { runCli } from './cli.js';
import type { Running } from './servers.js';

// Anything a terminal acts on: C0 but newline, DEL, C1.
const CONTROL = /[^\P{Cc}\n]/u;
const CASES = ['--only', 'replay,replay-header,mismatch,missing-key'];

describe('idemkit check against a target that answers with terminal control sequences', () => {
  let target: Running;
  beforeAll(async () => {
    target = await startHostile();
  });
  afterAll(() => target.close());

  it('the table shows the header, problem title and detail and body escaped, with no raw ESC, BEL, DEL or C1', async () => {
    const run = await runCli(['check', target.url, ...CASES, '--verbose']);
    expect(run.stderr).toBe('');
    // replay-header FAILs: the replay is "marked" with the hostile header value instead of `true`
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/FAIL +SHOULD +replay-header/);
    expect(run.stdout).not.toMatch(CONTROL);
    // the header value (C1 bytes), in the FAIL message
    expect(run.stdout).toContain(String.raw`(got "\x9b2K\x9b1A\x9d0;header\x9c")`);
    // the 400 and 422 problem+json title and detail, in the evidence
    expect(run.stdout).toContain(String.raw`no key → 400 {"title":"\x1b]0;title\x07","detail":"\x1b[2K\x1b[1A\x1b]52;c;cHduZWQ=\x07","status":400`);
    expect(run.stdout).toMatch(/→ 422 \{"title":"\\x1b\]0;title\\x07","detail":"\\x1b\[2K\\x1b\[1A\\x1b\]52;c;cHduZWQ=\\x07","status":422/);
    // the 201 body
    expect(run.stdout).toMatch(/1st → 201 \{"id":"[0-9a-f-]{36}","note":"\\x1b\]0;body\\x07\\x9b31m\\x7f"\}/);
  }, 30_000);

  it('--json escapes them too, and stays valid JSON holding the very characters the target sent', async () => {
    const run = await runCli(['check', target.url, ...CASES, '--json']);
    expect(run.code).toBe(1);
    expect(run.stdout).not.toMatch(CONTROL);
    expect(run.stdout).toContain(String.raw`\u009b2K\u009b1A\u009d0;header\u009c`);
    const report = JSON.parse(run.stdout) as CheckReport;
    const byId = (id: string) => report.cases.find((c) => c.id === id)!;
    expect(byId('replay-header').message).toContain(JSON.stringify(HOSTILE.header));
    expect(byId('missing-key').evidence[0]).toContain(`"title":"${HOSTILE.title}","detail":"${HOSTILE.detail}"`);
    expect(byId('replay').evidence[0]).toContain(`"note":"${HOSTILE.body}"`);
  }, 30_000);

  it('a baseline refused with such a problem: the stderr line is escaped', async () => {
    const refusing = await startHostile({ refuseAll: true });
    try {
      const run = await runCli(['check', refusing.url]);
      expect(run.code).toBe(2);
      expect(run.stdout).toBe('');
      expect(run.stderr).not.toMatch(CONTROL);
      expect(run.stderr).toContain(String.raw`answered 403 {"title":"\x1b]0;title\x07","detail":"\x1b[2K\x1b[1A\x1b]52;c;cHduZWQ=\x07"`);
    } finally {
      await refusing.close();
    }
  }, 30_000);
});

describe('formatReport', () => {
  it('with colour, the only escape sequences are its own colours', () => {
    const report: CheckReport = {
      url: 'http://127.0.0.1:1/charges',
      method: 'POST',
      settings: { concurrency: 2, rounds: 1, timeoutMs: 1000, leaseMs: undefined, strict: false },
      ok: false,
      summary: { PASS: 1, FAIL: 1, WARN: 0, SKIP: 0 },
      cases: [
        { id: 'replay', tier: 'MUST', title: 't', verdict: 'PASS', message: `ok ${HOSTILE.title}`, evidence: [], ms: 1 },
        { id: 'mismatch', tier: 'SHOULD', title: 't', verdict: 'FAIL', message: HOSTILE.detail, evidence: [`1st → 201 ${HOSTILE.body}`, 'a\nb\u202e'], ms: 1 },
      ],
      ms: 10,
    };
    const text = formatReport(report, { colour: true });
    const colours = ['\x1b[0m', '\x1b[2m', '\x1b[31m', '\x1b[32m', '\x1b[33m'];
    expect(colours.reduce((t, c) => t.replaceAll(c, ''), text)).not.toMatch(CONTROL);
    expect(text).toContain(`\x1b[31mFAIL  \x1b[0m  SHOULD   mismatch  ${String.raw`\x1b[2K\x1b[1A\x1b]52;c;cHduZWQ=\x07`}\n`);
    expect(text).toContain(String.raw`1st → 201 \x1b]0;body\x07\x9b31m\x7f`);
    // a newline inside a field cannot start a line of its own; a bidi override is shown, not obeyed
    expect(text).toContain(String.raw`a\nb\u202e`);
  });
});
