import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { sqliteWalFile } from '../support/databases.js';

const { db, file, cleanup } = sqliteWalFile();
const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children) if (child.exitCode === null) process.kill(child.pid!, 'SIGKILL');
  cleanup();
});

it('the guards hold across 4 processes sharing one SQLite file', async () => {
  const processes = 4;
  const keys = 25;
  const decrements = 10;
  db.exec(`CREATE TABLE payments (id INTEGER PRIMARY KEY AUTOINCREMENT, out_trade_no TEXT NOT NULL UNIQUE, amount INT NOT NULL);
    CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
    INSERT INTO orders (id, status) VALUES (1, 'PENDING');
    CREATE TABLE stock (sku TEXT PRIMARY KEY, stock INT NOT NULL, version INT NOT NULL);
    INSERT INTO stock VALUES ('A', 1000, 0);`);
  const script = join(import.meta.dirname, 'procs', 'sqlite-guards.ts');
  // Every conflict means another decrement landed, so (all decrements - 1) retries always suffice.
  const retries = processes * decrements - 1;
  const spawned = Array.from({ length: processes }, () =>
    fork(script, [file, String(keys), String(decrements), String(retries)], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
  );
  children.push(...spawned);
  // Barrier: every process has opened the file before any races.
  await Promise.all(spawned.map((c) => new Promise((resolve) => c.once('message', resolve))));
  const results = spawned.map(
    (c) => new Promise<{ inserted: number; changed: number; decremented: number }>((resolve) => c.once('message', resolve)),
  );
  for (const c of spawned) c.send('go');
  const counts = await Promise.all(results);
  const sum = (k: 'inserted' | 'changed' | 'decremented') => counts.reduce((n, c) => n + c[k], 0);
  expect(sum('inserted')).toBe(keys);
  expect(sum('changed')).toBe(1);
  expect(sum('decremented')).toBe(processes * decrements);
  expect(db.prepare('SELECT count(*) AS n FROM payments').get()).toEqual({ n: keys });
  expect(db.prepare('SELECT status FROM orders').get()).toEqual({ status: 'PAID' });
  expect(db.prepare('SELECT stock, version FROM stock').get()).toEqual({ stock: 1000 - processes * decrements, version: processes * decrements });
}, 120_000);
