/**
 * Proof across processes: several server processes share one store; duplicates spread over them
 * execute once. Executions are counted as rows of a separate business table.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MARIADB, POSTGRES, REDIS, requireService } from '../support/services.js';
import type { ProofBackend } from './backends.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, openBackend } from './backends.js';
import { killAll, startServer, workUntilAnswered } from './spawn.js';
import type { ServerProcess } from './spawn.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-proof-'));
afterAll(() => {
  killAll();
  rmSync(dir, { recursive: true, force: true });
});

const backends: Array<[string, string]> = [['sqlite', `sqlite:${join(dir, 'proof.db')}`]];
if (await requireService(POSTGRES)) backends.push(['postgres', POSTGRES_URL]);
if (await requireService(MARIADB)) backends.push(['mysql', MYSQL_URL]);
if (await requireService(REDIS)) backends.push(['redis', REDIS_URL]);
const ordersFile = join(dir, 'orders.db');

describe.each(backends)('across 4 processes on %s', (_label, url) => {
  describe.each(['fastify', 'express'])('through %s', (framework) => {
    const name = `procs_${framework}_${randomUUID().slice(0, 8)}`;
    let servers: ServerProcess[] = [];

    let backend: ProofBackend;

    beforeAll(async () => {
      backend = await openBackend(url, name, { ordersFile });
      // PROOF_STORE_TIMEOUT_MS shortens the servers' storeTimeoutMs, to force the 503-and-retry path.
      const storeTimeout = process.env.PROOF_STORE_TIMEOUT_MS;
      const env = { FRAMEWORK: framework, STORE_URL: url, NAME: name, ORDERS_FILE: ordersFile, ...(storeTimeout ? { STORE_TIMEOUT_MS: storeTimeout } : {}) };
      servers = await Promise.all(Array.from({ length: 4 }, () => startServer(env)));
    }, 60_000);
    afterAll(async () => {
      for (const s of servers) s.kill();
      await backend.drop();
      await backend.close();
    });

    it('200 concurrent requests with one key (50 per process) execute once', async () => {
      const key = randomUUID();
      // A claim that waits past storeTimeoutMs for a pooled connection (a loaded machine) gets a
      // 503 and runs nothing: retried, as a client does. Every other answer is kept as it came.
      const tries = await Promise.all(servers.flatMap((s) => Array.from({ length: 50 }, () => workUntilAnswered(s.url, key, [503]))));
      const answers = tries.map(({ answer }) => answer);
      expect(await backend.countOrders(key)).toBe(1);
      const originals = answers.filter((r) => r.status === 201 && !r.headers.get('idempotent-replayed'));
      expect(originals).toHaveLength(1);
      for (const r of answers) expect([201, 409]).toContain(r.status);
    }, 60_000);

    it('500 distinct keys, each sent 3 times concurrently to different processes, execute once and answer alike', async () => {
      const keys = Array.from({ length: 500 }, () => randomUUID());
      const before = await backend.countOrders();
      // 1,500 requests at once queue on each process's 5 connections: on a loaded machine a claim
      // can wait past storeTimeoutMs (a 503; the handler did not run), and a claim that lands after
      // its 503 holds the key until it is released (a 409). The client retries both, as a real one
      // does; the proof is that each key still executes once and its three requests get one answer.
      const tries = await Promise.all(keys.flatMap((key, i) => [0, 1, 2].map((j) => workUntilAnswered(servers[(i + j) % 4]!.url, key))));
      const answers = await Promise.all(tries.map(async ({ answer }) => ({ status: answer.status, body: await answer.text() })));
      // The bodies name any failure (a problem+json detail).
      expect(answers.filter((a) => a.status !== 201)).toEqual([]);
      expect((await backend.countOrders()) - before).toBe(500);
      for (let i = 0; i < answers.length; i += 3) {
        expect(new Set(answers.slice(i, i + 3).map((a) => a.body)).size).toBe(1);
      }
      for (const key of keys.slice(0, 20)) expect(await backend.countOrders(key)).toBe(1);
    }, 120_000);
  });
});
