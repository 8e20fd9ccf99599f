import type { CaseResult, CheckReport, Verdict } from './run.js';
import { printable } from './terminal.js';

const COLOURS: Record<Verdict, string> = { PASS: '\x1b[32m', FAIL: '\x1b[31m', WARN: '\x1b[33m', SKIP: '\x1b[2m' };

/**
 * The report as an aligned plain-text table; ANSI colour only when asked (stdout is a TTY). Every
 * field is printed with its control characters escaped (`\x1b`): messages and evidence hold the
 * target's bodies and headers, and a raw ESC, BEL or C1 in them would act on the terminal.
 */
export function formatReport(report: CheckReport, options: { colour?: boolean; verbose?: boolean } = {}): string {
  const rows = report.cases;
  const idWidth = Math.max(4, ...rows.map((r) => r.id.length));
  const lines = [`idemkit check ${printable(report.method)} ${printable(report.url)}`, ''];
  lines.push(`${'RESULT'.padEnd(6)}  ${'TIER'.padEnd(7)}  ${'CASE'.padEnd(idWidth)}  DETAIL`);
  for (const r of rows) lines.push(...formatCase(r, idWidth, options));
  const s = report.summary;
  lines.push('', `${s.PASS} passed, ${s.FAIL} failed, ${s.WARN} warned, ${s.SKIP} skipped in ${(report.ms / 1000).toFixed(1)} s`);
  lines.push(report.ok ? 'OK: every MUST and SHOULD case that ran passed' : 'FAILED: see the FAIL rows above');
  return lines.join('\n');
}

function formatCase(r: CaseResult, idWidth: number, options: { colour?: boolean; verbose?: boolean }): string[] {
  const verdict = options.colour ? `${COLOURS[r.verdict]}${r.verdict.padEnd(6)}\x1b[0m` : r.verdict.padEnd(6);
  const lines = [`${verdict}  ${r.tier.padEnd(7)}  ${r.id.padEnd(idWidth)}  ${printable(r.message)}`];
  // Evidence for what went wrong (and for everything with --verbose): the requests and answers.
  if (r.verdict === 'FAIL' || r.verdict === 'WARN' || options.verbose) {
    const indent = ' '.repeat(6 + 2 + 7 + 2 + idWidth + 2);
    for (const e of r.evidence) lines.push(`${indent}${printable(e)}`);
  }
  return lines;
}
