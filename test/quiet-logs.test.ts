// Issue 26, item 19: expected idemkit log lines stay out of a passing run (test/support/quiet-logs.ts).
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../src/stores/memory/index.js';
import { withIdempotency } from '../src/http/web.js';
import { heldLogLines } from './support/quiet-logs.js';

describe.skipIf(process.env.IDEMKIT_TEST_LOGS === '1')('idemkit log lines in the test run', () => {
  it("are held back while the test runs (printed only if it fails): a throwing handler's report is not on the console", async () => {
    const handler = withIdempotency(
      async () => {
        throw new Error('the handler failed on purpose');
      },
      { store: memoryStore(), scope: () => 'tenant' },
    );
    const response = await handler(new Request('http://localhost/charges', { method: 'POST', headers: { 'idempotency-key': 'quiet-1' }, body: '{}' }));
    expect(response.status).toBe(500);
    expect(heldLogLines()).toEqual([expect.stringMatching(/^idemkit: Error: the handler failed on purpose/)]);
  });
});
