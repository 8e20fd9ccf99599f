/**
 * A store that was never migrated is a permanent fault: idemkit answers 500 `store-schema-missing`
 * without Retry-After, and idemkit/client does not retry it (a retry cannot help until an operator
 * migrates). Against real PostgreSQL, through a real HTTP server.
 */
import { describe, expect, it } from 'vitest';
import { HttpStatusError, createIdempotentFetch } from '../../src/client/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { POSTGRES, requireService } from '../support/services.js';
import { newPool, uniqueTable } from '../stores/postgres-support.js';
import { idempotentServer } from './servers.js';

describe.skipIf(!(await requireService(POSTGRES)))('an unmigrated PostgreSQL table', () => {
  it('the client sends one request, gets the 500 store-schema-missing problem, and does not retry it', async () => {
    const pool = newPool({ max: 2 });
    const logged: string[] = [];
    const server = await idempotentServer({
      backend: postgresStore({ pool, table: uniqueTable() }), // never migrated
      logger: { warn: (line) => void logged.push(line), error: (line) => void logged.push(line) },
    });
    try {
      // Default options: 3 retries and a full budget would retry any other 500.
      const response = await createIdempotentFetch()(`${server.url}/charges`, { method: 'POST', body: 'x' });
      expect(response.status).toBe(500);
      expect(response.headers.get('retry-after')).toBeNull();
      expect(await response.json()).toMatchObject({ type: 'urn:idemkit:problem:store-schema-missing', status: 500 });
      expect(response.idempotency.attempts).toBe(1);

      const error = await createIdempotentFetch({ throwOnError: true })(`${server.url}/charges`, { method: 'POST', body: 'y' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(HttpStatusError);
      expect(error).toMatchObject({ status: 500, attempts: 1, problem: { type: 'urn:idemkit:problem:store-schema-missing' } });

      expect(server.seen).toHaveLength(2);
      expect(server.effects()).toBe(0);
      expect(logged.join('\n')).toContain('ERR_IDEMKIT_STORE_SCHEMA_MISSING');
    } finally {
      await server.close();
      await pool.end();
    }
  });
});
