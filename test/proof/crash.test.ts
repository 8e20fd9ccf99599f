/**
 * Proof under crashes, in transactional mode: a server process is SIGKILLed mid-request, restarted,
 * and retried. The business table must end with exactly one row per key.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { openBackend } from './backends.js';
import { killAll, startServer, work } from './spawn.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-crash-'));
afterAll(() => {
  killAll();
  rmSync(dir, { recursive: true, force: true });
});

const LEASE_MS = 2000;
const transactional: Array<[string, string]> = [['sqlite', `sqlite:${join(dir, 'crash.db')}`]];

/** Waits until the dead owner's lease has run out on the store's clock: a fact, read from the store. */
async function leaseExpired(store: IdempotencyStore, key: string): Promise<void> {
  for (;;) {
    const record = await store.get({ scope: 'proof', key });
    if (!record || record.state !== 'in_flight' || record.leaseUntil <= Date.now()) return;
    await new Promise((r) => setTimeout(r, Math.max(10, record.leaseUntil - Date.now())));
  }
}

describe.each(transactional)('crashes in transactional mode on %s', (_label, url) => {
  describe.each(['fastify', 'express'])('through %s', (framework) => {
    const name = `crash_${framework}_${randomUUID().slice(0, 8)}`;
    const env = { FRAMEWORK: framework, STORE_URL: url, NAME: name, TRANSACTIONAL: '1', LEASE_MS: String(LEASE_MS) };

    it('killed after the business INSERT, before COMMIT: after the lease a retry runs once', async () => {
      const backend = await openBackend(url, name);
      const key = randomUUID();
      const doomed = await startServer(env);
      await expect(work(doomed.url, key, { 'x-crash': 'after-insert' })).rejects.toThrow();
      expect(await doomed.exited).toBe('SIGKILL');
      expect(await backend.countOrders(key)).toBe(0);
      expect((await backend.store.get({ scope: 'proof', key }))?.state).toBe('in_flight');

      const restarted = await startServer(env);
      const record = await backend.store.get({ scope: 'proof', key });
      if (record!.leaseUntil - Date.now() > 500) {
        // The dead owner's lease still holds (the machine was quick to restart): nobody may take over yet.
        expect((await work(restarted.url, key)).status).toBe(409);
      }
      await leaseExpired(backend.store, key);
      const retry = await work(restarted.url, key);
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      const replay = await work(restarted.url, key);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(await backend.countOrders(key)).toBe(1);
      restarted.kill();
      await backend.close();
    }, 60_000);

    it('killed after COMMIT, before the response was sent: the retry replays', async () => {
      const backend = await openBackend(url, name);
      const key = randomUUID();
      const doomed = await startServer(env);
      await expect(work(doomed.url, key, { 'x-crash': 'before-response' })).rejects.toThrow();
      expect(await doomed.exited).toBe('SIGKILL');
      expect(await backend.countOrders(key)).toBe(1);

      const restarted = await startServer(env);
      const retry = await work(restarted.url, key);
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect((await retry.json()).key).toBe(key);
      expect(await backend.countOrders(key)).toBe(1);
      restarted.kill();
      await backend.close();
    }, 60_000);
  });
});
