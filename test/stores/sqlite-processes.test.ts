import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, expect, it } from 'vitest';
import { sqliteStore } from '../../src/stores/sqlite/index.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-procs-'));
const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children) if (child.exitCode === null) process.kill(child.pid!, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

it('gives one winner per key across 4 processes sharing one SQLite file', async () => {
  const file = join(dir, 'shared.db');
  sqliteStore({ database: new Database(file) }); // creates the schema once, before the race
  const script = join(import.meta.dirname, 'procs', 'sqlite-claimer.ts');
  const spawned = Array.from({ length: 4 }, () =>
    fork(script, [file, 'the-key', '500'], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
  );
  children.push(...spawned);
  // Barrier: every process has opened the file before any claims.
  await Promise.all(spawned.map((c) => new Promise((resolve) => c.once('message', resolve))));
  const results = spawned.map((c) => new Promise<{ shared: number; distinct: number }>((resolve) => c.once('message', resolve)));
  for (const c of spawned) c.send('go');
  const counts = await Promise.all(results);
  expect(counts.reduce((n, c) => n + c.shared, 0)).toBe(1);
  expect(counts.reduce((n, c) => n + c.distinct, 0)).toBe(500);
  const db = new Database(file, { readonly: true });
  expect(db.prepare('SELECT count(*) AS n FROM idempotency_records').get()).toEqual({ n: 501 });
  db.close();
}, 60_000);
