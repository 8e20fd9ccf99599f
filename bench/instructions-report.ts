/**
 * What `npm run bench:instructions` makes of its runs: the markdown tables (RESULTS.md's
 * instructions section), and the CI guard's comparison with bench/instructions-baseline.json.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import type { InstrImpl, InstrResults, InstrRun, InstrStore, InstrWorkload } from './instructions-shared.js';
import { INSTR_FRAMEWORKS, INSTR_STORES, INSTR_WORKLOADS } from './instructions-shared.js';
import type { Framework } from './shared.js';
import { median } from './shared.js';

const START = '<!-- instructions:start (written by npm run bench:instructions) -->';
const END = '<!-- instructions:end -->';

/** A row's runs: the median, the range, how many. */
export interface Summary {
  readonly n: number;
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly mainThread: number;
  readonly allocatedBytes: number;
  readonly scavengesPer1000: number;
  readonly majorGcsPer1000: number;
}

export function summarize(runs: readonly InstrRun[], framework: Framework, workload: InstrWorkload, impl: InstrImpl, store: InstrStore | 'none'): Summary | undefined {
  const mine = runs.filter((r) => r.framework === framework && r.workload === workload && r.impl === impl && r.store === store);
  if (mine.length === 0) return undefined;
  const counts = mine.map((r) => r.instructionsPerRequest);
  return {
    n: mine.length,
    median: median(counts),
    min: Math.min(...counts),
    max: Math.max(...counts),
    mainThread: median(mine.map((r) => r.mainThreadPerRequest)),
    allocatedBytes: median(mine.map((r) => r.allocatedBytesPerRequest)),
    scavengesPer1000: median(mine.map((r) => r.scavengesPer1000)),
    majorGcsPer1000: median(mine.map((r) => (1000 * r.markCompactsCounted) / r.gcRequests)),
  };
}

const k = (n: number) => `${(n / 1000).toFixed(1)}k`;
const signedK = (n: number) => `${n >= 0 ? '+' : '−'}${k(Math.abs(n))}`;
/** The median, and with several runs the range as ± half of it in % of the median. */
function withSpread(s: Summary | undefined): string {
  if (!s) return 'n/a';
  if (s.n === 1) return k(s.median);
  return `${k(s.median)} (${s.n} runs, ${k(s.min)}…${k(s.max)})`;
}
const WORKLOAD_LABEL: Record<InstrWorkload, string> = { 'new-key': 'new key', replay: 'replay' };
const STORE_LABEL: Record<InstrStore, string> = { memory: 'memory', sqlite: 'SQLite', postgres: 'PostgreSQL', redis: 'Redis (ioredis)', 'redis-node': 'Redis (node-redis)' };
const FRAMEWORK_LABEL: Partial<Record<Framework, string>> = { fastify: 'Fastify', express: 'Express' };

export function renderMarkdown(results: InstrResults): string {
  const { runs } = results;
  const frameworks = INSTR_FRAMEWORKS.filter((f) => runs.some((r) => r.framework === f));
  const workloads = INSTR_WORKLOADS.filter((w) => runs.some((r) => r.workload === w));
  const stores = INSTR_STORES.filter((s) => runs.some((r) => r.store === s));
  const out: string[] = [];
  out.push(START, '', '## Instructions per request (callgrind)', '');
  out.push(
    `Written by \`${results.command}\` (bench/instructions.ts) on ${results.date.slice(0, 10)}: ${results.cpu}, Node ${results.node}, ${results.valgrind}; ` +
      `code ${results.commit}, src sha256 ${results.srcHash}.`,
    '',
    `Each figure is one server process (\`bench/server.ts\`, started as the throughput bench starts it) under Valgrind's callgrind, with ${results.connections} keep-alive ` +
      `connections open from start to end: ${results.warmupRequests.toLocaleString('en')} warm-up requests with instrumentation off, then ${results.countedRequests.toLocaleString('en')} ` +
      'counted requests in windows of 400: the instructions of the whole server process (every thread: the JIT, GC and libuv included) per request. ' +
      "A window more than 15 % above its run's median (a major GC's marking and sweeping; a timer such as the memory store's 60 s sweeper, which callgrind's " +
      'slow clock fires every few thousand requests) is left out and counted apart (bench/results/instructions.json). *Added* is the implementation minus the bare ' +
      'framework on the same workload in the same run. Three V8 flags undo what callgrind\'s ~50× slower clock does to a server (bench/instructions-server.ts): ' +
      '`--no-concurrent-recompilation`, `--no-memory-reducer`, `--min-semi-space-size=16`. Rows on Redis and PostgreSQL get several server processes each ' +
      '(how many answers one wake-up of the event loop finds varies): median (runs, min…max).',
    '',
  );
  const targets = instructionTargets(results);
  if (targets.length > 0) {
    out.push('### Targets (issue 29)', '');
    for (const t of targets) out.push(`- **${t.ok ? 'PASS' : 'FAIL'}** ${t.text}`);
    out.push('');
  }
  for (const framework of frameworks) {
    const bare = (w: InstrWorkload) => summarize(runs, framework, w, 'bare', 'none');
    const bareLine = workloads.map((w) => `${WORKLOAD_LABEL[w]} ${withSpread(bare(w))}`).join(', ');
    out.push(`### ${FRAMEWORK_LABEL[framework] ?? framework} (bare: ${bareLine})`, '');
    out.push('| store, workload | idemkit | idemkit added | node-idempotency | node-idempotency added | idemkit added ÷ peer added |');
    out.push('|---|---:|---:|---:|---:|---:|');
    for (const store of stores) {
      for (const workload of workloads) {
        const b = bare(workload);
        const ours = summarize(runs, framework, workload, 'idemkit', store);
        const peer = summarize(runs, framework, workload, 'node-idempotency', store);
        if (!ours && !peer) continue;
        const added = (s: Summary | undefined) => (s && b ? s.median - b.median : undefined);
        const a = added(ours);
        const p = added(peer);
        out.push(
          `| ${STORE_LABEL[store]}, ${WORKLOAD_LABEL[workload]} | ${withSpread(ours)} | ${a === undefined ? 'n/a' : `**${signedK(a)}**`} | ${peer ? withSpread(peer) : 'n/a'} | ` +
            `${p === undefined ? 'n/a' : signedK(p)} | ${a !== undefined && p !== undefined && p > 0 ? (a / p).toFixed(2) : 'n/a'} |`,
        );
      }
    }
    out.push('');
    out.push(...floorTable(runs, framework, workloads));
  }
  out.push('### Allocation', '');
  out.push(
    `From the second half of each warm-up (${Math.floor(results.warmupRequests / 2).toLocaleString('en')} requests) with V8's GC profiler on (bench/instructions-probe.ts): ` +
      "the bytes allocated on V8's heap per request (its growth between collections), the scavenges (young-generation collections) per 1,000 requests, from the " +
      'bytes allocated over the bytes one scavenge takes to come (the young generation is 16 MiB, as natively under load: a count over a few thousand requests would be ' +
      '±1 scavenge), and the major GCs counted. Medians over the runs of a row.',
    '',
  );
  out.push(
    '| framework | store, workload | KB allocated per request: bare / idemkit / node-idempotency | scavenges per 1,000 requests: bare / idemkit / node-idempotency | ' +
      'idemkit scavenges ÷ bare | major GCs per 1,000 requests: bare / idemkit / node-idempotency |',
  );
  out.push('|---|---|---:|---:|---:|---:|');
  for (const framework of frameworks) {
    for (const store of stores) {
      for (const workload of workloads) {
        const b = summarize(runs, framework, workload, 'bare', 'none');
        const ours = summarize(runs, framework, workload, 'idemkit', store);
        const peer = summarize(runs, framework, workload, 'node-idempotency', store);
        if (!ours && !peer) continue;
        const kb = (s: Summary | undefined) => (s ? (s.allocatedBytes / 1024).toFixed(1) : 'n/a');
        const sc = (s: Summary | undefined) => (s ? s.scavengesPer1000.toFixed(1) : 'n/a');
        const ratio = ours && b && b.scavengesPer1000 > 0 ? (ours.scavengesPer1000 / b.scavengesPer1000).toFixed(2) : 'n/a';
        const major = (s: Summary | undefined) => (s ? s.majorGcsPer1000.toFixed(2) : 'n/a');
        out.push(
          `| ${FRAMEWORK_LABEL[framework] ?? framework} | ${STORE_LABEL[store]}, ${WORKLOAD_LABEL[workload]} | ${kb(b)} / ${kb(ours)} / ${kb(peer)} | ` +
            `${sc(b)} / ${sc(ours)} / ${sc(peer)} | ${ratio} | ${major(b)} / ${major(ours)} / ${major(peer)} |`,
        );
      }
    }
  }
  out.push('', END);
  return out.join('\n');
}

/** What the floor's own table and the Redis targets say it is. */
const FLOOR_ROUND_TRIPS: Record<InstrWorkload, string> = { 'new-key': 'two ioredis commands per new key add', replay: 'one ioredis command per replay adds' };

/**
 * The Redis floor of a framework (runs of impl `floor`, bench/server.ts's startFloor): its
 * instructions, what it adds to the bare framework, and idemkit's Redis row above it. Nothing
 * when the run has no floor (saved runs from before it).
 */
function floorTable(runs: readonly InstrRun[], framework: Framework, workloads: readonly InstrWorkload[]): string[] {
  if (!runs.some((r) => r.framework === framework && r.impl === 'floor')) return [];
  const out: string[] = [];
  out.push(
    `**${FRAMEWORK_LABEL[framework] ?? framework} + Redis (ioredis), the floor**: the same server with no idempotency layer, only the round trips any race-correct ` +
      'one makes, through the same client: `SET key <250 bytes> PX <24 h> NX GET` before the handler (a replay is answered from its reply, the handler skipped), ' +
      "and on a new key one `EVALSHA` storing the answer before it goes (bench/server.ts, startFloor); idemkit's Redis store makes the same round trips. " +
      '*Above the floor* is idemkit added − floor added: what its own logic costs.',
    '',
  );
  out.push(
    '| workload | ioredis floor | floor added | idemkit added | idemkit above the floor | ½ of node-idempotency added | floor: KB allocated per request, scavenges per 1,000 requests |',
  );
  out.push('|---|---:|---:|---:|---:|---:|---:|');
  for (const workload of workloads) {
    const b = summarize(runs, framework, workload, 'bare', 'none');
    const floor = summarize(runs, framework, workload, 'floor', 'redis');
    if (!floor) continue;
    const ours = summarize(runs, framework, workload, 'idemkit', 'redis');
    const peer = summarize(runs, framework, workload, 'node-idempotency', 'redis');
    const added = (x: Summary | undefined) => (x && b ? x.median - b.median : undefined);
    const f = added(floor);
    const a = added(ours);
    const p = added(peer);
    const cell = (n: number | undefined, bold = false) => (n === undefined ? 'n/a' : bold ? `**${signedK(n)}**` : signedK(n));
    out.push(
      `| ${WORKLOAD_LABEL[workload]} | ${withSpread(floor)} | ${cell(f, true)} | ${cell(a)} | ${cell(a !== undefined && f !== undefined ? a - f : undefined)} | ` +
        `${cell(p === undefined ? undefined : p * PEER_SHARE)} | ${(floor.allocatedBytes / 1024).toFixed(1)} KB, ${floor.scavengesPer1000.toFixed(1)} |`,
    );
  }
  out.push('');
  return out;
}

/** The instruction and allocation targets of issue 29 that a run measured: each PASS or FAIL with its figures. */
export interface InstrTarget {
  readonly ok: boolean;
  readonly text: string;
}

/** idemkit's added instructions at most this fraction of node-idempotency's (Fastify; memory and Redis). */
const PEER_SHARE = 0.5;
/** idemkit's scavenges per 1,000 requests at most this multiple of the bare framework's. */
const SCAVENGE_RATIO = 1.15;

export function instructionTargets(results: InstrResults): InstrTarget[] {
  const targets: InstrTarget[] = [];
  const { runs } = results;
  for (const store of ['memory', 'redis', 'redis-node'] as const) {
    for (const workload of INSTR_WORKLOADS) {
      const bare = summarize(runs, 'fastify', workload, 'bare', 'none');
      const ours = summarize(runs, 'fastify', workload, 'idemkit', store);
      // node-idempotency has one Redis store, on ioredis: both of idemkit's Redis clients are held to it.
      const peer = summarize(runs, 'fastify', workload, 'node-idempotency', store === 'redis-node' ? 'redis' : store);
      if (!bare || !ours || !peer) continue;
      const a = ours.median - bare.median;
      const p = peer.median - bare.median;
      const ratio = p > 0 ? a / p : Number.POSITIVE_INFINITY;
      // On ioredis, with the floor in the run: whether the target is within reach at all.
      const floor = store === 'redis' ? summarize(runs, 'fastify', workload, 'floor', 'redis') : undefined;
      let floorText = '';
      if (floor) {
        const f = floor.median - bare.median;
        const room = p * PEER_SHARE - f;
        floorText =
          ` (floor: ${FLOOR_ROUND_TRIPS[workload]} ${signedK(f)}; ${PEER_SHARE === 0.5 ? '½' : PEER_SHARE} of node-idempotency is ${signedK(p * PEER_SHARE)}: ` +
          `${room > 0 ? `which leaves ${signedK(room)} for everything but Redis; idemkit's own work above the floor is ${signedK(a - f)}` : `below the floor alone by ${signedK(-room)}`})`;
      }
      targets.push({
        ok: ratio <= PEER_SHARE,
        text: `Fastify + ${STORE_LABEL[store]}, ${WORKLOAD_LABEL[workload]}: idemkit adds ${signedK(a)} instructions per request, node-idempotency ${signedK(p)}: ${ratio.toFixed(2)} × (target ≤ ${PEER_SHARE})${floorText}`,
      });
    }
  }
  for (const framework of INSTR_FRAMEWORKS) {
    for (const store of INSTR_STORES) {
      for (const workload of INSTR_WORKLOADS) {
        const bare = summarize(runs, framework, workload, 'bare', 'none');
        const ours = summarize(runs, framework, workload, 'idemkit', store);
        if (!bare || !ours || bare.scavengesPer1000 <= 0) continue;
        const ratio = ours.scavengesPer1000 / bare.scavengesPer1000;
        targets.push({
          ok: ratio <= SCAVENGE_RATIO,
          text:
            `${FRAMEWORK_LABEL[framework] ?? framework} + ${STORE_LABEL[store]}, ${WORKLOAD_LABEL[workload]}: ${ours.scavengesPer1000.toFixed(2)} scavenges per 1,000 requests, ` +
            `bare ${bare.scavengesPer1000.toFixed(2)}: ${ratio.toFixed(2)} × (target ≤ ${SCAVENGE_RATIO}; ${(ours.allocatedBytes / 1024).toFixed(1)} KB against ${(bare.allocatedBytes / 1024).toFixed(1)} KB allocated per request)`,
        });
      }
    }
  }
  return targets;
}

/** Several runs' results as one (`--from`): the first one's provenance, every run. */
export function mergeResults(parts: readonly InstrResults[]): InstrResults {
  const first = parts[0]!;
  for (const part of parts) {
    if (part.warmupRequests !== first.warmupRequests || part.countedRequests !== first.countedRequests || part.connections !== first.connections) {
      throw new Error(`--from: ${part.date} counted ${part.warmupRequests}/${part.countedRequests}/${part.connections} (warm-up/counted/connections), the first ${first.warmupRequests}/${first.countedRequests}/${first.connections}: not one table`);
    }
  }
  const commits = [...new Set(parts.map((p) => p.commit))];
  return { ...first, commit: commits.join(' + '), command: parts.map((p) => p.command).join('; '), runs: parts.flatMap((p) => p.runs) };
}

/** Replaces the instructions section of a markdown file (between its markers), or appends it. */
export function writeMarkedSection(file: URL, section: string): void {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    // a new file
  }
  const start = text.indexOf(START);
  const end = text.indexOf(END);
  const next = start >= 0 && end > start ? text.slice(0, start) + section + text.slice(end + END.length) : `${text.trimEnd()}\n\n${section}\n`;
  writeFileSync(file, next);
}

/** bench/instructions-baseline.json: what the CI guard compares with (Fastify, memory store). */
export interface Baseline {
  readonly about: string;
  /** The guard fails when idemkit's added instructions per request exceed the baseline's by more than this fraction. */
  readonly tolerance: number;
  readonly commit: string;
  readonly date: string;
  readonly node: string;
  readonly valgrind: string;
  readonly connections: number;
  readonly warmupRequests: number;
  readonly countedRequests: number;
  /** Per workload: instructions per request of the bare framework and of idemkit, and their difference. */
  readonly rows: Readonly<Partial<Record<InstrWorkload, { readonly bare: number; readonly idemkit: number; readonly added: number }>>>;
}

function guardRows(results: InstrResults): Partial<Record<InstrWorkload, { bare: number; idemkit: number; added: number }>> {
  const rows: Partial<Record<InstrWorkload, { bare: number; idemkit: number; added: number }>> = {};
  for (const workload of INSTR_WORKLOADS) {
    const bare = summarize(results.runs, 'fastify', workload, 'bare', 'none');
    const ours = summarize(results.runs, 'fastify', workload, 'idemkit', 'memory');
    if (!bare || !ours) continue;
    rows[workload] = { bare: Math.round(bare.median), idemkit: Math.round(ours.median), added: Math.round(ours.median - bare.median) };
  }
  return rows;
}

export function baselineFrom(results: InstrResults, tolerance: number): Baseline {
  return {
    about:
      "idemkit's instructions per request on Fastify with the memory store, counted by `npm run bench:instructions -- --guard` (bench/instructions.ts). " +
      '.ci/run fails when the added instructions (idemkit − bare) of a workload exceed `added × (1 + tolerance)`. Rewritten by `--update-baseline`, ' +
      'and committed only in a commit that says why the cost moved.',
    tolerance,
    commit: results.commit,
    date: results.date,
    node: results.node,
    valgrind: results.valgrind,
    connections: results.connections,
    warmupRequests: results.warmupRequests,
    countedRequests: results.countedRequests,
    rows: guardRows(results),
  };
}

export function checkBaseline(results: InstrResults, baseline: Baseline): { ok: boolean; lines: string[]; failed: InstrWorkload[] } {
  const lines: string[] = [];
  const failed: InstrWorkload[] = [];
  let ok = true;
  if (results.node !== baseline.node) {
    lines.push(`note: the baseline was counted on Node ${baseline.node}, this run on ${results.node}: a different V8 counts differently (refresh the baseline with the Node version change)`);
  }
  for (const [name, ours, theirs] of [
    ['connections', results.connections, baseline.connections],
    ['warm-up requests', results.warmupRequests, baseline.warmupRequests],
    ['counted requests', results.countedRequests, baseline.countedRequests],
  ] as const) {
    if (ours !== theirs) {
      lines.push(`FAIL: ${name} ${ours}, the baseline's ${theirs}: not comparable`);
      ok = false;
    }
  }
  const now = guardRows(results);
  for (const workload of INSTR_WORKLOADS) {
    const before = baseline.rows[workload];
    const after = now[workload];
    if (!before) continue;
    if (!after) {
      lines.push(`FAIL: ${workload}: not measured`);
      ok = false;
      continue;
    }
    const limit = before.added * (1 + baseline.tolerance);
    const change = (after.added - before.added) / before.added;
    const pass = after.added <= limit;
    if (!pass) {
      ok = false;
      failed.push(workload);
    }
    const runs = results.runs.filter((r) => r.framework === 'fastify' && r.workload === workload && r.impl === 'idemkit' && r.store === 'memory').length;
    lines.push(
      `${pass ? 'PASS' : 'FAIL'}: Fastify + memory, ${WORKLOAD_LABEL[workload]}${runs > 1 ? ` (medians of ${runs} runs)` : ''}: idemkit adds ${k(after.added)} instructions per request, ` +
        `the baseline ${k(before.added)} (${change >= 0 ? '+' : '−'}${Math.abs(change * 100).toFixed(1)} %; limit ${k(limit)}, +${(baseline.tolerance * 100).toFixed(0)} %). ` +
        `bare ${k(after.bare)} (baseline ${k(before.bare)}), idemkit ${k(after.idemkit)} (baseline ${k(before.idemkit)})`,
    );
  }
  if (!ok) {
    lines.push(
      'The guard counts what a protected request costs on top of bare Fastify; a change that makes it cost more fails here. If the cost is wanted, ' +
        'rewrite the baseline (npm run bench:instructions -- --guard --update-baseline) in a commit that says why.',
    );
  }
  return { ok, lines, failed };
}
