/** The reconciliation report: a text table for the terminal, JSON, and a small HTML page. */
import type { Report } from './scenarios.js';

const mark = (pass: boolean) => (pass ? 'ok' : 'FAIL');

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd();
  return [line(header), widths.map((w) => '─'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export function textReport(report: Report): string {
  const out: string[] = [];
  out.push('Scenarios');
  out.push(
    table(
      ['#', 'scenario', 'checks', 'time', 'result'],
      report.scenarios.map((s) => [String(s.id), s.title, `${s.checks.filter((c) => c.pass).length}/${s.checks.length}`, `${(s.ms / 1000).toFixed(1)} s`, mark(s.checks.every((c) => c.pass))]),
    ),
  );
  const failedChecks = report.scenarios.flatMap((s) => s.checks.filter((c) => !c.pass).map((c) => `  [${s.id}] ${c.name}: expected ${c.expected}, got ${c.actual}`));
  if (failedChecks.length > 0) out.push('', 'Failed checks', ...failedChecks);
  out.push('', `Counters: ${Object.entries(report.stats).map(([k, v]) => `${k} ${v}`).join(' · ')}`);
  out.push('', 'Reconciliation');
  out.push(table(['table', 'check', 'expected', 'actual', ''], report.reconciliation.map((r) => [r.table, r.check, String(r.expected), String(r.actual), mark(r.pass)])));
  out.push('');
  out.push(
    `${report.pass ? 'PASS' : 'FAIL'}: ${report.orders} orders, concurrency ${report.concurrency}, seed ${report.seed}, ${report.database}, ${report.queue}, ${(report.durationMs / 1000).toFixed(1)} s`,
  );
  return out.join('\n');
}

const esc = (s: unknown) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);

export function htmlReport(report: Report): string {
  const rows = (cells: unknown[], pass?: boolean) =>
    `<tr${pass === false ? ' class="fail"' : ''}>${cells.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`;
  const scenarios = report.scenarios
    .map(
      (s) =>
        `<h3>${s.id}. ${esc(s.title)} <small>${(s.ms / 1000).toFixed(1)} s</small></h3><table><tr><th>check</th><th>expected</th><th>actual</th><th></th></tr>${s.checks
          .map((c) => rows([c.name, c.expected, c.actual, mark(c.pass)], c.pass))
          .join('')}</table>`,
    )
    .join('\n');
  const recon = report.reconciliation.map((r) => rows([r.table, r.check, r.expected, r.actual, mark(r.pass)], r.pass)).join('');
  const stats = Object.entries(report.stats).map(([k, v]) => rows([k, v])).join('');
  return `<!doctype html><meta charset="utf-8"><title>idemkit payments: ${report.pass ? 'PASS' : 'FAIL'}</title>
<style>body{font:14px system-ui,sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
.fail td{background:#fdd}.verdict{font-size:1.6em;font-weight:bold;color:${report.pass ? '#070' : '#b00'}}small{color:#777;font-weight:normal}</style>
<h1>idemkit payments acceptance</h1>
<p class="verdict">${report.pass ? 'PASS' : 'FAIL'}</p>
<p>${report.orders} orders · concurrency ${report.concurrency} · seed <code>${esc(report.seed)}</code> · ${esc(report.database)} · ${esc(report.queue)} · ${(report.durationMs / 1000).toFixed(1)} s</p>
<h2>Reconciliation</h2><table><tr><th>table</th><th>check</th><th>expected</th><th>actual</th><th></th></tr>${recon}</table>
<h2>Scenarios</h2>${scenarios}
<h2>Counters</h2><table>${stats}</table>`;
}
