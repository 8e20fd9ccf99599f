/**
 * The floors part's pure side (bench/floors.ts measures): how a captured statement is replayed
 * with fresh values, the figures of a run, its targets, and its RESULTS.md section between its
 * markers. No timing here, so test/bench/floors.test.ts can check all of it.
 */
import { median } from './shared.js';

export const FLOORS_START = '<!-- floors:start (written by npm run bench:floors, and by npm run bench) -->';
export const FLOORS_END = '<!-- floors:end -->';

/** PostgreSQL: idemkit's throughput is at least this share of the raw loop's (issue 29). */
export const PG_TARGET = 0.9;
/** SQLite: the store's time is at most this multiple of the raw loop's (issue 29). */
export const SQLITE_TARGET = 1.2;

export type FloorWorkload = 'new-key' | 'replay';

/** What changes from one request to the next in a captured statement's values. */
export interface Marks {
  /** The idempotency key the capture used. */
  readonly key: string;
  /** The owner token the store made for it (absent when none was seen). */
  readonly token?: string;
  /** `Date.now()` at the capture: epoch-ms values near it are times the store computed. */
  readonly time: number;
}

export interface Fresh {
  readonly key: string;
  readonly token: string;
  /** ms since the capture: added to every captured time. */
  readonly timeShift: number;
}

/** Epoch ms within this much of the capture are the store's clock (now, now + lease, now + window). */
const TIME_WINDOW_MS = 400 * 86_400_000;

/**
 * A function that rebuilds `value` for another request: the captured key and token replaced by
 * fresh ones, epoch-ms times moved by the time since the capture, everything else (the
 * fingerprint, the lease, a body Buffer) the same value. Built once per statement, so the raw loop
 * pays for no search.
 */
export function templateOf(value: unknown, marks: Marks): (fresh: Fresh) => unknown {
  if (typeof value === 'string') {
    if (value === marks.key) return (f) => f.key;
    if (marks.token !== undefined && value === marks.token) return (f) => f.token;
    return () => value;
  }
  if (typeof value === 'number' && Number.isInteger(value) && value > 1e12 && Math.abs(value - marks.time) < TIME_WINDOW_MS) {
    return (f) => value + f.timeShift;
  }
  if (Array.isArray(value)) {
    const parts = value.map((v) => templateOf(v, marks));
    return (f) => parts.map((p) => p(f));
  }
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    const entries = Object.entries(value).map(([k, v]) => [k, templateOf(v, marks)] as const);
    return (f) => {
      const out: Record<string, unknown> = {};
      for (const [k, p] of entries) out[k] = p(f);
      return out;
    };
  }
  // Buffers, null, booleans, other numbers: sent as they were.
  return () => value;
}

/** Median, and the lowest and highest, of a repetition's figures. */
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
}

export function spreadOf(values: readonly number[]): Spread {
  return { median: median(values), min: Math.min(...values), max: Math.max(...values) };
}

/** One value per repetition: side `a` over side `b`, the two measured next to each other. */
export function ratios(a: readonly number[], b: readonly number[]): number[] {
  if (a.length !== b.length) throw new Error(`floors: ${a.length} against ${b.length} repetitions`);
  return a.map((x, i) => x / b[i]!);
}

export interface PgWorkloadFloor {
  readonly workload: FloorWorkload;
  /** Statements (round trips) per request, as captured from the store. */
  readonly statements: number;
  /** Requests per second, one per repetition. */
  readonly storeRps: readonly number[];
  readonly rawRps: readonly number[];
  /** This (client) process's CPU µs per request, one per repetition: where the store's own work shows. */
  readonly storeCpuMicros: readonly number[];
  readonly rawCpuMicros: readonly number[];
  /** CPU µs per request of the pool's PostgreSQL backends (the same statements: the same on both sides). */
  readonly storeServerMicros: readonly number[];
  readonly rawServerMicros: readonly number[];
}

/**
 * Where the time would go on a machine whose CPU is the limit (client and server on one host, as
 * here): the raw loop's client + server CPU per request over the store's, per repetition. It does
 * not move with other processes' load as throughput does.
 */
export function cpuBoundRatios(w: PgWorkloadFloor): number[] {
  return w.storeCpuMicros.map((s, i) => (w.rawCpuMicros[i]! + w.rawServerMicros[i]!) / (s + w.storeServerMicros[i]!));
}

export interface PgFloor {
  /** Requests in flight at once: the HTTP bench's connections. */
  readonly concurrency: number;
  /** The pool's `max`, as the bench server opens it (bench/stores.ts). */
  readonly poolMax: number;
  readonly durationSec: number;
  readonly warmupSec: number;
  /** The statements captured from the store, as sent (values abbreviated). */
  readonly captured: readonly CapturedText[];
  readonly workloads: readonly PgWorkloadFloor[];
}

export interface CapturedText {
  readonly workload: FloorWorkload;
  readonly text: string;
  readonly values: string;
}

export interface SqliteWorkloadFloor {
  readonly workload: FloorWorkload;
  readonly statements: number;
  /** µs per request inside the store's calls, in-process, one per repetition. */
  readonly storeMicros: readonly number[];
  /** µs per request of the raw loop, one per repetition. */
  readonly rawMicros: readonly number[];
  /**
   * CPU µs per request of the process, one per repetition: the store's whole loop (its awaits
   * included) and the raw loop's. Unlike wall time, it does not grow when other processes take
   * the cores.
   */
  readonly storeCpuMicros: readonly number[];
  readonly rawCpuMicros: readonly number[];
  /**
   * µs per request inside the store's calls in the bench server under load (Fastify, 50
   * connections), one per run; the raw loop's median is the floor it is held to.
   */
  readonly inServerMicros?: readonly number[];
}

export interface SqliteFloor {
  readonly iterations: number;
  readonly captured: readonly CapturedText[];
  readonly framework: string;
  readonly workloads: readonly SqliteWorkloadFloor[];
}

export interface FloorResults {
  readonly date: string;
  readonly node: string;
  readonly commit: string;
  readonly command: string;
  readonly repetitions: number;
  readonly postgres?: PgFloor;
  readonly sqlite?: SqliteFloor;
  /** The database server's version, for the report. */
  readonly postgresVersion?: string;
  readonly betterSqliteVersion?: string;
}

export interface FloorTarget {
  readonly ok: boolean;
  readonly text: string;
}

const r2 = (n: number) => n.toFixed(2);
const r1 = (n: number) => n.toFixed(1);
const int = (n: number) => Math.round(n).toLocaleString('en');
const spreadText = (s: Spread, f = r2) => `${f(s.median)} (${f(s.min)}–${f(s.max)})`;

/** Each target, PASS or FAIL, from the median of the per-repetition ratios. */
export function floorTargets(results: FloorResults): FloorTarget[] {
  const lines: FloorTarget[] = [];
  for (const w of results.postgres?.workloads ?? []) {
    const r = spreadOf(ratios(w.storeRps, w.rawRps));
    lines.push({
      ok: r.median >= PG_TARGET,
      text:
        `PostgreSQL, ${w.workload === 'new-key' ? 'new key (claim + complete, two commits)' : 'replay (one claim)'}: idemkit at ${spreadText(r)} × the raw loop's ` +
        `throughput at ${results.postgres!.concurrency} in flight (target ≥ ${PG_TARGET}); CPU-bound ratio ${spreadText(spreadOf(cpuBoundRatios(w)))}`,
    });
  }
  for (const w of results.sqlite?.workloads ?? []) {
    const floor = median(w.rawMicros);
    if (w.inServerMicros !== undefined && w.inServerMicros.length > 0) {
      const s = spreadOf(w.inServerMicros.map((m) => m / floor));
      lines.push({
        ok: s.median <= SQLITE_TARGET,
        text:
          `SQLite, ${w.workload}: the store's time inside the server (${results.sqlite!.framework}) ${r1(median(w.inServerMicros))} µs, ${spreadText(s)} × the raw loop's ` +
          `${r1(floor)} µs (target ≤ ${SQLITE_TARGET})`,
      });
    }
    const inProcess = spreadOf(ratios(w.storeCpuMicros, w.rawCpuMicros));
    lines.push({
      ok: inProcess.median <= SQLITE_TARGET,
      text: `SQLite, ${w.workload}, in-process CPU time: the store ${r1(median(w.storeCpuMicros))} µs, ${spreadText(inProcess)} × the raw loop's ${r1(median(w.rawCpuMicros))} µs (target ≤ ${SQLITE_TARGET})`,
    });
  }
  return lines;
}

/** The RESULTS.md section, between its markers. */
export function floorsSection(results: FloorResults): string {
  const out: string[] = [FLOORS_START, '', '## Floors: PostgreSQL and SQLite against a raw loop of the same statements', ''];
  out.push(
    `Written by \`${results.command}\` (bench/floors.ts) on ${results.date.slice(0, 10)}: Node ${results.node}, ${results.commit}` +
      `${results.postgresVersion ? `, ${results.postgresVersion}` : ''}${results.betterSqliteVersion ? `, better-sqlite3 ${results.betterSqliteVersion}` : ''}. ` +
      `The statements are captured from the store itself (its pool's \`query\`, its Database's prepared statements) for one new key and one replay, ` +
      `then sent again with fresh keys, tokens and times by a loop that does nothing else: the floor. ${results.repetitions} repetitions, each measuring ` +
      'the store and the raw loop next to each other (which goes first alternates); the ratio is taken per repetition, shown as median (lowest–highest).',
    '',
  );
  out.push('### Targets', '');
  for (const t of floorTargets(results)) out.push(`- **${t.ok ? 'PASS' : 'FAIL'}** ${t.text}`);
  out.push('');
  const pg = results.postgres;
  if (pg) {
    out.push(
      '### PostgreSQL',
      '',
      `${pg.concurrency} requests in flight (the HTTP bench's connections), each a claim then a complete (new key) or one claim (replay), ` +
        `through one \`pg.Pool\` of max ${pg.poolMax} (as the bench server opens it), ${pg.warmupSec} s warm-up then ${pg.durationSec} s per side and repetition ` +
        'in slices of 0.5 s that alternate between the sides. *Client CPU*: this process\'s CPU time per request (the raw loop\'s is the driver\'s alone); ' +
        "*PostgreSQL CPU*: the pool's backends' (from /proc); *CPU-bound ratio*: (raw client + server CPU) ÷ (idemkit's), the throughput ratio on a machine " +
        'whose cores are the limit, which other processes\' load does not move.',
      '',
      '| workload | statements | idemkit req/s | raw loop req/s | idemkit ÷ raw | client CPU µs/req: idemkit | raw loop | PostgreSQL CPU µs/req: idemkit | raw loop | CPU-bound ratio |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    );
    for (const w of pg.workloads) {
      out.push(
        `| ${w.workload} | ${w.statements} | ${int(median(w.storeRps))} | ${int(median(w.rawRps))} | ${spreadText(spreadOf(ratios(w.storeRps, w.rawRps)))} | ` +
          `${r1(median(w.storeCpuMicros))} | ${r1(median(w.rawCpuMicros))} | ${r1(median(w.storeServerMicros))} | ${r1(median(w.rawServerMicros))} | ${spreadText(spreadOf(cpuBoundRatios(w)))} |`,
      );
    }
    out.push('', 'The statements, as the store sent them:', '');
    for (const c of pg.captured) out.push(`- ${c.workload}: \`${c.text}\` with ${c.values}`);
    out.push('');
  }
  const lite = results.sqlite;
  if (lite) {
    out.push(
      '### SQLite',
      '',
      `In-process, one request at a time, in blocks of 250 that alternate between the sides, ${int(lite.iterations)} requests per side and repetition: ` +
        "*store µs*, the wall time inside the store's `claim` and `complete` calls (as the bench server times them); *raw loop µs*, the same prepared " +
        "statements through better-sqlite3 back to back; *CPU*, the process's CPU time per request (the store's whole loop, its awaits included), " +
        'which does not grow when other processes take the cores. ' +
        `*In the server*: the store's calls timed inside the bench server (${lite.framework}, 50 connections) under load, one value per run, against the raw loop's wall µs.`,
      '',
      '| workload | statements | store µs | raw loop µs | store ÷ raw | CPU µs: store | raw loop | CPU ÷ | in the server µs | in the server ÷ raw |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    );
    for (const w of lite.workloads) {
      const floor = median(w.rawMicros);
      const inServer = w.inServerMicros && w.inServerMicros.length > 0 ? w.inServerMicros : undefined;
      out.push(
        `| ${w.workload} | ${w.statements} | ${spreadText(spreadOf(w.storeMicros))} | ${spreadText(spreadOf(w.rawMicros))} | ${spreadText(spreadOf(ratios(w.storeMicros, w.rawMicros)))} | ` +
          `${r2(median(w.storeCpuMicros))} | ${r2(median(w.rawCpuMicros))} | ${spreadText(spreadOf(ratios(w.storeCpuMicros, w.rawCpuMicros)))} | ` +
          `${inServer ? spreadText(spreadOf(inServer), r1) : 'n/a'} | ${inServer ? spreadText(spreadOf(inServer.map((m) => m / floor))) : 'n/a'} |`,
      );
    }
    out.push('', 'The statements, as the store ran them:', '');
    for (const c of lite.captured) out.push(`- ${c.workload}: \`${c.text}\` with ${c.values}`);
    out.push('');
  }
  out.push(FLOORS_END);
  return out.join('\n');
}

/** Every `<!-- name:start … -->…<!-- name:end -->` section of a markdown text, by name. */
export function markedSections(text: string): Map<string, string> {
  const found = new Map<string, string>();
  const start = /<!-- ([a-z-]+):start[^>]*-->/g;
  for (let m = start.exec(text); m !== null; m = start.exec(text)) {
    const end = `<!-- ${m[1]}:end -->`;
    const at = text.indexOf(end, m.index);
    if (at < 0) continue;
    found.set(m[1]!, text.slice(m.index, at + end.length));
    start.lastIndex = at + end.length;
  }
  return found;
}

/** `text` with the section `name` replaced by `section`, or `section` appended when it has none. */
export function replaceSection(text: string, name: string, section: string): string {
  const old = markedSections(text).get(name);
  if (old !== undefined) return text.replace(old, () => section);
  return `${text.trimEnd()}\n\n${section}\n`;
}

/**
 * A report written anew (`npm run bench`, bench/render.ts) keeps the sections other parts wrote
 * into the one it replaces (`npm run bench:instructions`'s, this part's), unless it carries its own.
 */
export function keepSections(previous: string, next: string): string {
  const mine = markedSections(next);
  let text = next;
  for (const [name, section] of markedSections(previous)) if (!mine.has(name)) text = replaceSection(text, name, section);
  return text;
}

/** A captured value list for the report: long strings and buffers abbreviated. */
export function describeValues(values: readonly unknown[] | Record<string, unknown> | undefined): string {
  if (values === undefined) return 'no values';
  const one = (v: unknown): string => {
    if (Buffer.isBuffer(v) || v instanceof Uint8Array) return `<${v.byteLength} bytes>`;
    if (typeof v === 'string') return JSON.stringify(v.length > 24 ? `${v.slice(0, 12)}…` : v);
    return JSON.stringify(v) ?? String(v);
  };
  if (Array.isArray(values)) return `[${values.map(one).join(', ')}]`;
  return `{ ${Object.entries(values)
    .map(([k, v]) => `${k}: ${one(v)}`)
    .join(', ')} }`;
}
