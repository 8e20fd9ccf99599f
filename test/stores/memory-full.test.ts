/**
 * Issue 26 item 4: a full memory store refuses new keys instead of forgetting an answer inside its
 * window. Through the engine and an HTTP adapter (the Web one): one tenant's flood of new keys
 * once evicted another tenant's completed record, and that tenant's retry ran the handler again.
 */
import { describe, expect, it, vi } from 'vitest';
import { withIdempotency } from '../../src/http/web.js';
import { memoryStore } from '../../src/stores/memory/index.js';

describe('a full memory store behind the middleware', () => {
  it('one tenant’s flood: another tenant’s retry replays, new keys answer 503 store-full with Retry-After, one log line naming maxRecords', async () => {
    const maxRecords = 20;
    const store = memoryStore({ maxRecords, sweepIntervalMs: 0 });
    const logger = { warn: vi.fn(), error: vi.fn() };
    const executed: string[] = [];
    const handler = withIdempotency(
      async (request: Request) => {
        const key = request.headers.get('idempotency-key')!;
        executed.push(`${request.headers.get('x-tenant')}/${key}`);
        return Response.json({ charge: key, n: executed.length }, { status: 201 });
      },
      { store, scope: (request: Request) => request.headers.get('x-tenant') ?? 'anonymous', logger },
    );
    const post = (tenant: string, key: string) =>
      handler(
        new Request('http://shop.test/charges', {
          method: 'POST',
          headers: { 'idempotency-key': key, 'x-tenant': tenant, 'content-type': 'application/json' },
          body: JSON.stringify({ amount: 1200 }),
        }),
      );

    const first = await post('tenant-b', 'charge-1');
    expect(first.status).toBe(201);
    const original = await first.text();

    // Tenant A sends half again as many new keys as the store holds.
    const statuses: number[] = [];
    for (let i = 0; i < maxRecords + 10; i++) statuses.push((await post('tenant-a', `flood-${i}`)).status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(maxRecords - 1);
    expect(statuses.filter((s) => s === 503)).toHaveLength(11);

    // Tenant B's retry is answered from its record: the handler does not run again.
    const retry = await post('tenant-b', 'charge-1');
    expect(retry.status).toBe(201);
    expect(await retry.text()).toBe(original);
    expect(executed.filter((e) => e === 'tenant-b/charge-1')).toHaveLength(1);

    // A new key is refused with its own problem, and a hint of when to come back.
    const refused = await post('tenant-b', 'charge-2');
    expect(refused.status).toBe(503);
    expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const problem = (await refused.json()) as Record<string, unknown>;
    expect(problem).toMatchObject({ type: 'urn:idemkit:problem:store-full', status: 503, title: 'Idempotency store full' });
    // The same hint in ms, for a client that reads it (idemkit's).
    expect(Math.ceil((problem.retryAfterMs as number) / 1000)).toBe(Number(refused.headers.get('retry-after')));
    expect(executed).not.toContain('tenant-b/charge-2');
    expect(executed).toHaveLength(maxRecords);

    // Twelve refusals, one line (the logger's rate limit), naming the bound that was reached.
    expect(logger.error).toHaveBeenCalledTimes(1);
    expect(String(logger.error.mock.calls[0]![0])).toMatch(/ERR_IDEMKIT_STORE_FULL: memory store is full \(maxRecords = 20\)/);
    expect(store.stats()).toMatchObject({ records: maxRecords, completed: maxRecords, refused: 12 });
    store.close();
  });
});
