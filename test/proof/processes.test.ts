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
import { killAll, startServer, work } from './spawn.js';
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
      const env = { FRAMEWORK: framework, STORE_URL: url, NAME: name, ORDERS_FILE: ordersFile };
      servers = await Promise.all(Array.from({ length: 4 }, () => startServer(env)));
    }, 60_000);
    afterAll(async () => {
      for (const s of servers) s.kill();
      await backend.drop();
      await backend.close();
    });

    it('200 concurrent requests with one key (50 per process) execute once', async () => {
      const key = randomUUID();
      const answers = await Promise.all(servers.flatMap((s) => Array.from({ length: 50 }, () => work(s.url, key))));
      expect(await backend.countOrders(key)).toBe(1);
      const originals = answers.filter((r) => r.status === 201 && !r.headers.get('idempotent-replayed'));
      expect(originals).toHaveLength(1);
      for (const r of answers) expect([201, 409]).toContain(r.status);
    }, 60_000);

    it('500 distinct keys, each sent 3 times concurrently to different processes, execute 500 times', async () => {
      const keys = Array.from({ length: 500 }, () => randomUUID());
      const before = await backend.countOrders();
      const answers = await Promise.all(keys.flatMap((key, i) => [0, 1, 2].map((j) => work(servers[(i + j) % 4]!.url, key))));
      expect(answers.filter((r) => r.status >= 500)).toHaveLength(0);
      expect((await backend.countOrders()) - before).toBe(500);
      for (const key of keys.slice(0, 20)) expect(await backend.countOrders(key)).toBe(1);
    }, 120_000);
  });
});
