/** The ratio chart of bench/RESULTS.md, as SVG (bench/results-chart.svg). */
import { writeFileSync } from 'node:fs';
import type { BenchResults } from './results.js';
import { BUSY_PERCENT, WORKLOAD_TITLE, busyPercent, int, raceCorrect, ratioOver } from './results.js';
import type { Impl, StoreKind } from './shared.js';

const COLORS: Record<string, string> = {
  idemkit: '#2563eb',
  'node-idempotency': '#f59e0b',
  'express-idempotency': '#dc2626',
  powertools: '#16a34a',
};
const STORE_OPACITY: Record<string, number> = { memory: 0.45, sqlite: 0.6, postgres: 0.8, redis: 1 };

const escapeXml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

type Op =
  | { kind: 'text'; x: number; y: number; text: string; anchor?: 'end'; bold?: boolean; size?: number; color?: string }
  | { kind: 'rect'; x: number; y: number; w: number; h: number; color: string; opacity: number }
  | { kind: 'dash'; x: number; y1: number; y2: number };

/** A horizontal bar chart of throughput ratios (0 ms handler), grouped by framework and workload. */
function chartLayout(results: BenchResults): { width: number; height: number; ops: Op[] } {
  const groups: Array<{ title: string; bars: Array<{ label: string; ratio: number; impl: Impl; store: StoreKind; warn: boolean }> }> = [];
  for (const framework of results.meta.frameworks) {
    for (const workload of ['new-key', 'replay', 'contention', 'no-key'] as const) {
      const bare = results.configs.find((c) => c.impl === 'bare' && c.framework === framework && c.workload === workload && c.delayMs === 0);
      if (!bare) continue;
      const bars = results.configs
        .filter((c) => c.impl !== 'bare' && c.framework === framework && c.workload === workload && c.delayMs === 0)
        .map((c) => ({
          label: `${c.impl} / ${c.store}`,
          ratio: ratioOver(results.configs, c) ?? c.reqPerSec / bare.reqPerSec,
          impl: c.impl,
          store: c.store,
          warn: raceCorrect(results.races, framework, c.impl, c.store) === false || c.duplicates > 0,
        }));
      if (bars.length > 0) groups.push({ title: `${framework}: ${WORKLOAD_TITLE[workload]} (bare ${int(bare.reqPerSec)} req/s)`, bars });
    }
  }
  const left = 260;
  const plot = 520;
  const barH = 14;
  const gap = 5;
  const max = Math.max(1.1, ...groups.flatMap((g) => g.bars.map((b) => b.ratio))) * 1.05;
  const ops: Op[] = [
    { kind: 'text', x: 10, y: 22, text: 'Throughput against the bare framework (1.0x = dashed line; higher is better)', bold: true, size: 15 },
    {
      kind: 'text',
      x: 10,
      y: 42,
      color: '#555',
      text: `${results.meta.date.slice(0, 10)}, ${results.meta.cpus}, Node ${results.meta.node}; ! = double executions or failed race check`,
    },
  ];
  const busy = busyPercent(results.configs);
  if (busy > BUSY_PERCENT) {
    ops.push({ kind: 'text', x: 10, y: 60, color: '#dc2626', bold: true, text: `Preliminary: other processes used ${busy.toFixed(0)} % of a core; ratios are noise` });
  }
  let y = busy > BUSY_PERCENT ? 74 : 62;
  for (const g of groups) {
    ops.push({ kind: 'text', x: 10, y: y + 12, text: g.title, bold: true });
    y += 22;
    const top = y;
    for (const b of g.bars) {
      const w = Math.max(1, (b.ratio / max) * plot);
      ops.push(
        { kind: 'text', x: left - 8, y: y + barH - 2, text: `${b.label}${b.warn ? ' !' : ''}`, anchor: 'end' },
        { kind: 'rect', x: left, y, w, h: barH, color: COLORS[b.impl] ?? '#666666', opacity: STORE_OPACITY[b.store] ?? 1 },
        { kind: 'text', x: left + w + 6, y: y + barH - 2, text: `${b.ratio.toFixed(2)}x` },
      );
      y += barH + gap;
    }
    ops.push({ kind: 'dash', x: left + plot / max, y1: top - 2, y2: y - gap + 2 });
    y += 14;
  }
  ops.push({
    kind: 'text',
    x: 10,
    y: y + 8,
    color: '#555',
    text: 'Colour: idemkit blue, node-idempotency amber, express-idempotency red, Powertools green; shade: store (light memory, dark Redis).',
  });
  return { width: left + plot + 90, height: y + 24, ops };
}

export function chartSvg(results: BenchResults): string {
  const { width, height, ops } = chartLayout(results);
  const body = ops.map((op) => {
    switch (op.kind) {
      case 'text':
        return (
          `<text x="${op.x.toFixed(1)}" y="${op.y}"${op.anchor ? ' text-anchor="end"' : ''}${op.bold ? ' font-weight="bold"' : ''}` +
          `${op.size ? ` font-size="${op.size}"` : ''}${op.color ? ` fill="${op.color}"` : ''}>${escapeXml(op.text)}</text>`
        );
      case 'rect':
        return `<rect x="${op.x}" y="${op.y}" width="${op.w.toFixed(1)}" height="${op.h}" fill="${op.color}" fill-opacity="${op.opacity}"/>`;
      case 'dash':
        return `<line x1="${op.x.toFixed(1)}" y1="${op.y1}" x2="${op.x.toFixed(1)}" y2="${op.y2}" stroke="#111" stroke-dasharray="3,2"/>`;
    }
  });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    '<rect width="100%" height="100%" fill="#fff"/>',
    ...body,
    '</svg>',
    '',
  ].join('\n');
}

export function writeChart(results: BenchResults, svgUrl: URL): void {
  writeFileSync(svgUrl, chartSvg(results));
}
