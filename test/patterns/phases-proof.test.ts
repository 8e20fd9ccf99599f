/**
 * Proof of recovery points under crashes. A server process runs the checkout phases (create the
 * order → charge at a foreign service → mark charged → enqueue a job) and SIGKILLs itself inside
 * one phase, for each phase in turn, while several requests are in flight. It is restarted without
 * the crash, and the requests are recovered by client retries, by the completer, or by both racing.
 * Afterwards every request happened exactly once: one order row, charged once, one job, and one
 * charge at the foreign service (which counts effects per idempotency key); every record replays.
 * On SQLite (a file shared by the processes), PostgreSQL and MariaDB.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completer } from '../../src/patterns/completer.js';
import { foreignKeyFor } from '../../src/patterns/phases.js';
import { killAll, startServer } from '../proof/spawn.js';
import { MARIADB, POSTGRES, requireService } from '../support/services.js';
import type { ForeignService } from './foreign-service.js';
import { startForeignService } from './foreign-service.js';
import type { CheckoutBackend, CrashPoint } from './phases-app.js';
import { CRASH_POINTS, SCOPE, checkoutPhases, openCheckoutBackend } from './phases-app.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-phases-'));
const serverScript = join(import.meta.dirname, 'phases-server.ts');
const LEASE_MS = 1000;
const REQUESTS = 5;

const backends: Array<[string, string]> = [['sqlite', `sqlite:${join(dir, 'phases.db')}`]];
if (await requireService(POSTGRES)) backends.push(['postgres', 'postgres://postgres@127.0.0.1:5432/test']);
if (await requireService(MARIADB)) backends.push(['mysql', 'mysql://root@127.0.0.1:3306/test']);

let foreign: ForeignService;
beforeAll(async () => {
  foreign = await startForeignService();
});
afterAll(async () => {
  killAll();
  await foreign?.close();
  rmSync(dir, { recursive: true, force: true });
});

type Recovery = 'client retries' | 'the completer' | 'two completers racing client retries';
const RECOVERIES: Recovery[] = ['client retries', 'the completer', 'two completers racing client retries'];

const order = (url: string, key: string, amount: number) =>
  fetch(`${url}/orders`, {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ amount }),
  });

/** A client that retries while the key is in flight elsewhere (409), as Retry-After asks. */
async function orderUntilDone(url: string, key: string, amount: number): Promise<Response> {
  for (;;) {
    const response = await order(url, key, amount);
    if (response.status !== 409) return response;
    await response.arrayBuffer();
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe.each(backends)('recovery phases on %s', (_label, url) => {
  const name = `phases_${randomUUID().slice(0, 8)}`;
  let backend: CheckoutBackend;
  beforeAll(async () => {
    backend = await openCheckoutBackend(url, name);
    await backend.migrate();
  });
  afterAll(async () => {
    await backend.drop();
    await backend.close();
  });
  const env = (crash?: CrashPoint) => ({ STORE_URL: url, NAME: name, FOREIGN_URL: foreign.url, LEASE_MS: String(LEASE_MS), CRASH: crash ?? '' });

  /** Waits until no dead owner's lease holds any of the keys, read from the store (with 20 ms for clock reads). */
  async function leasesOver(keys: string[]): Promise<void> {
    for (const key of keys) {
      for (;;) {
        const record = await backend.store.get({ scope: SCOPE, key });
        if (!record || record.state !== 'in_flight' || record.leaseUntil + 20 <= Date.now()) break;
        await new Promise((resolve) => setTimeout(resolve, Math.max(10, record.leaseUntil + 20 - Date.now())));
      }
    }
  }

  async function assertExactlyOnce(key: string, body: { order: string; charge: string }): Promise<void> {
    const column = backend.db.dialect === 'mysql' ? '`key`' : '"key"';
    const orders = await backend.db.query<{ charged: number; charge_id: string }>(`SELECT charged, charge_id FROM orders_${name} WHERE ${column} = ?`, [key]);
    expect(orders.rows, `order rows of ${key}`).toHaveLength(1);
    expect(Number(orders.rows[0]!.charged), `times ${key} was marked charged`).toBe(1);
    expect(orders.rows[0]!.charge_id).toBe(body.charge);
    const jobs = await backend.db.query<{ charge_id: string }>(`SELECT charge_id FROM jobs_${name} WHERE ${column} = ?`, [key]);
    expect(jobs.rows.map((r) => r.charge_id), `jobs of ${key}`).toEqual([body.charge]);
    expect(foreign.effects.get(foreignKeyFor(SCOPE, key, 'charged')), `foreign charges of ${key}`).toBe(1);
    expect(body.order).toBe(key);
    const record = await backend.store.get({ scope: SCOPE, key });
    expect(record?.state).toBe('completed');
  }

  describe.each(CRASH_POINTS)('killed inside %s', (point) => {
    it.each(RECOVERIES)('every request happens exactly once after recovery by %s', async (recovery) => {
      const keys: string[] = Array.from({ length: REQUESTS }, () => randomUUID());
      const amount = (i: number) => 100 + i;

      const doomed = await startServer(env(point), serverScript);
      const first = await Promise.allSettled(keys.map((key, i) => order(doomed.url, key, amount(i))));
      expect(await doomed.exited).toBe('SIGKILL');
      expect(first.some((r) => r.status === 'rejected')).toBe(true);

      const restarted = await startServer(env(), serverScript);
      await leasesOver(keys);
      // What the crash left: records with a recovery point are the completer's to finish.
      const resumable = [];
      for (const key of keys) if ((await backend.store.get({ scope: SCOPE, key }))?.recoveryPoint) resumable.push(key);

      let completedByCompleter: string[] = [];
      const newCompleter = () =>
        completer({
          store: backend.store,
          phases: checkoutPhases({ name, foreignUrl: foreign.url, dialect: backend.db.dialect }),
          response: (result) => ({ status: 201, body: result }),
          leaseMs: LEASE_MS,
          batchSize: 1000,
        });
      let answers: Response[];
      if (recovery === 'client retries') {
        answers = await Promise.all(keys.map((key, i) => orderUntilDone(restarted.url, key, amount(i))));
      } else if (recovery === 'the completer') {
        const report = await newCompleter().runOnce();
        expect(report.failed).toEqual([]);
        completedByCompleter = report.completed.filter((r) => keys.includes(r.key)).map((r) => r.key);
        expect(completedByCompleter.sort()).toEqual([...resumable].sort());
        answers = await Promise.all(keys.map((key, i) => orderUntilDone(restarted.url, key, amount(i))));
      } else {
        const [answered, a, b] = await Promise.all([
          Promise.all(keys.map((key, i) => orderUntilDone(restarted.url, key, amount(i)))),
          newCompleter().runOnce(),
          newCompleter().runOnce(),
        ]);
        answers = answered;
        expect([...a.failed, ...b.failed]).toEqual([]);
        // The claim decided: no record was completed by both completers.
        const both = a.completed.filter((r) => b.completed.some((s) => s.key === r.key));
        expect(both).toEqual([]);
      }

      const bodies = [];
      for (const [i, answer] of answers.entries()) {
        expect(answer.status, `answer for key #${i}`).toBe(201);
        if (completedByCompleter.includes(keys[i]!)) expect(answer.headers.get('idempotent-replayed')).toBe('true');
        bodies.push((await answer.json()) as { order: string; charge: string });
      }
      for (const [i, key] of keys.entries()) await assertExactlyOnce(key, bodies[i]!);
      const replays = await Promise.all(keys.map((key, i) => order(restarted.url, key, amount(i))));
      for (const [i, replay] of replays.entries()) {
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(await replay.json()).toEqual(bodies[i]);
      }
      if (point === 'charged') {
        // The crash came after the foreign call returned: its resume called again with the same key, deduplicated there.
        expect(keys.some((key) => (foreign.requests.get(foreignKeyFor(SCOPE, key, 'charged')) ?? 0) >= 2)).toBe(true);
      }
      restarted.kill();
    }, 60_000);
  });
});
