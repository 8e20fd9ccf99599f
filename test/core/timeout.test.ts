import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { withIdempotency } from '../../src/http/web.js';
import { memoryStore } from '../../src/stores/memory.js';

/** A store whose claim never answers, like a server behind a dead connection. */
function hangingStore(): IdempotencyStore {
  const store = memoryStore({ sweepIntervalMs: 0 });
  return Object.assign(Object.create(store) as IdempotencyStore, { claim: () => new Promise<never>(() => {}) });
}

describe('storeTimeoutMs', () => {
  it('answers 503 within the configured time, without running the handler', async () => {
    let executions = 0;
    const handle = withIdempotency(
      async () => {
        executions++;
        return new Response('ran');
      },
      { store: hangingStore(), storeTimeoutMs: 100 },
    );
    const started = Date.now();
    const response = await handle(new Request('http://local/x', { method: 'POST', headers: { 'idempotency-key': 'k' }, body: '{}' }));
    expect(response.status).toBe(503);
    expect((await response.json()).type).toBe('https://idemkit.dev/problems/store-unavailable');
    expect(Date.now() - started).toBeLessThan(2000);
    expect(executions).toBe(0);
  });
});
