import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { migrateProcessed } from '../../src/messaging/index.js';
import { sqlExecutor } from '../../src/patterns/sql.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-msg-procs-'));
const file = join(dir, 'shared.db');
const pids = new Set<number>();

function worker(env: Record<string, string>): Promise<{ processed: number; duplicates: number }> {
  const child = spawn(process.execPath, ['--conditions=idemkit-source', '--import', 'tsx', join(import.meta.dirname, 'sqlite-worker.ts')], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  pids.add(child.pid!);
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (err += c.toString()));
  return new Promise((resolve, reject) =>
    child.once('exit', (code) => {
      pids.delete(child.pid!);
      if (code === 0) resolve(JSON.parse(out.trim()) as { processed: number; duplicates: number });
      else reject(new Error(`worker exited ${code}: ${err}`));
    }),
  );
}

afterAll(() => {
  for (const pid of pids) process.kill(pid, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe('consumeOnce across processes on one SQLite file', () => {
  it('3 processes consuming the same 200 ids concurrently: each id processed once', { timeout: 60_000 }, async () => {
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    const exec = sqlExecutor(db);
    await migrateProcessed(exec, { table: 'processed' });
    await exec.query('CREATE TABLE effects (message_id TEXT NOT NULL, pid INTEGER NOT NULL)');
    const env = { FILE: file, TABLE: 'processed', EFFECTS: 'effects', COUNT: '200' };
    const results = await Promise.all([worker(env), worker(env), worker(env)]);
    expect(results.reduce((n, r) => n + r.processed, 0)).toBe(200);
    expect(results.reduce((n, r) => n + r.duplicates, 0)).toBe(400);
    const { rows } = await exec.query<{ n: number; d: number }>('SELECT COUNT(*) AS n, COUNT(DISTINCT message_id) AS d FROM effects');
    expect(rows[0]).toEqual({ n: 200, d: 200 });
    db.close();
  });
});
