/** Spawns and watches proof-consumer.ts processes; every child is killed by pid on cleanup. */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { ConsumeStats } from '../../src/messaging/delivery.js';
import { migrateProcessed } from '../../src/messaging/index.js';
import type { TestDatabase } from '../support/databases.js';

const script = join(import.meta.dirname, 'proof-consumer.ts');
const live = new Set<ChildProcess>();

export interface ConsumerProcess {
  readonly pid: number;
  /** Processed messages this process printed. */
  readonly ok: () => number;
  /** Duplicates skipped, as reported. */
  readonly dups: () => number;
  /** Resolves with the signal or exit code. */
  readonly exited: Promise<NodeJS.Signals | number | null>;
  readonly stats: () => ConsumeStats | undefined;
  readonly output: () => string;
  kill(signal: NodeJS.Signals): void;
}

export function startConsumer(env: Record<string, string>): ConsumerProcess {
  const child = spawn(process.execPath, ['--conditions=idemkit-source', '--import', 'tsx', script], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  let ok = 0;
  let dups = 0;
  let stats: ConsumeStats | undefined;
  let tail = '';
  let errors = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    const lines = (tail + chunk).split('\n');
    tail = lines.pop()!;
    for (const line of lines) {
      if (line === 'ok') ok++;
      else if (line.startsWith('dup ')) dups++;
      else if (line.startsWith('stats ')) stats = JSON.parse(line.slice(6)) as ConsumeStats;
    }
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (errors = (errors + chunk).slice(-4000)));
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve(signal ?? code);
    }),
  );
  return {
    pid: child.pid!,
    ok: () => ok,
    dups: () => dups,
    stats: () => stats,
    output: () => errors,
    exited,
    kill(signal) {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid!, signal);
    },
  };
}

/** Kills every consumer still running (afterAll). */
export function killAll(): void {
  for (const child of live) if (child.exitCode === null && child.signalCode === null) process.kill(child.pid!, 'SIGKILL');
}

/** Polls a condition (no fixed sleeps standing in for it); fails naming what never happened. */
export async function until(what: string, done: () => boolean | Promise<boolean>, timeoutMs = 45_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** 1000 ids, each with 1–3 deliveries, and the deliveries shuffled. */
export function plan(count: number): { copies: Map<string, number>; deliveries: string[] } {
  const copies = new Map<string, number>();
  const deliveries: string[] = [];
  for (let i = 0; i < count; i++) {
    const id = `msg-${i}`;
    const n = 1 + Math.floor(Math.random() * 3);
    copies.set(id, n);
    for (let c = 0; c < n; c++) deliveries.push(id);
  }
  for (let i = deliveries.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [deliveries[i], deliveries[j]] = [deliveries[j]!, deliveries[i]!];
  }
  return { copies, deliveries };
}

/**
 * The crash schedule both proofs run before the final, crash-free consumer: a SIGKILL the process
 * sends itself at its `at`-th handler call or ack, or one from outside once it has processed
 * `external` messages (it holds still there, HOLD_AT, so the schedule never runs out of messages).
 */
export const CRASHES: ReadonlyArray<{ phase: 'handler' | 'ack'; at: number } | { external: number }> = [
  { phase: 'handler', at: 120 },
  { phase: 'ack', at: 120 },
  { external: 150 },
  { phase: 'handler', at: 60 },
  { phase: 'ack', at: 60 },
  { external: 100 },
];

/** The consumer's tables on `t`: processed records, one row per effect, and the effects counter. */
export async function createProofTables(t: TestDatabase, broker: string): Promise<{ PROCESSED: string; EFFECTS: string; COUNTERS: string }> {
  const names = {
    PROCESSED: t.table(`proof_${broker}_processed`),
    EFFECTS: t.table(`proof_${broker}_effects`),
    COUNTERS: t.table(`proof_${broker}_counters`),
  };
  await migrateProcessed(t.db, { table: names.PROCESSED });
  await t.db.query(`CREATE TABLE ${names.EFFECTS} (message_id TEXT NOT NULL)`);
  await t.db.query(`CREATE TABLE ${names.COUNTERS} (name TEXT PRIMARY KEY, n INTEGER NOT NULL)`);
  await t.db.query(`INSERT INTO ${names.COUNTERS} (name, n) VALUES ('effects', 0)`);
  return names;
}
