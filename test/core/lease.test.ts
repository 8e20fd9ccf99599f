import { afterEach, describe, expect, it, vi } from 'vitest';
import { withIdempotency } from '../../src/http/web.js';
import { memoryStore } from '../../src/stores/memory/index.js';

/** A request the test releases by hand, so "still running" is a fact, not a timing guess. */
function gatedHandler() {
  let executions = 0;
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const waiting: Array<{ n: number; resolve: () => void }> = [];
  const handler = async () => {
    executions++;
    for (const w of waiting.filter((w) => w.n <= executions)) w.resolve();
    await gate;
    return Response.json({ n: executions }, { status: 201 });
  };
  /** Resolves once the handler has started `n` times. */
  const started = (n: number) => new Promise<void>((resolve) => (executions >= n ? resolve() : waiting.push({ n, resolve })));
  return { handler, open: () => open(), running: started(1), started, executions: () => executions };
}

const post = (key: string) =>
  new Request('http://local/charges', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{}' });

describe('lease renewal', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it.each([
    [true, 409, 1],
    [false, 201, 2],
  ])('with renewLease=%s, a retry after several lease periods gets %i (%i executions)', async (renewLease, status, executions) => {
    // Fake timers move the keeper's ticks and the memory store's clock (Date.now) together, so a
    // loaded machine cannot delay a renewal past the lease: the test owns time.
    vi.useFakeTimers();
    const gated = gatedHandler();
    const store = memoryStore({ sweepIntervalMs: 0 });
    const handle = withIdempotency(gated.handler, { store, leaseMs: 60, renewLease });
    const first = handle(post('k'));
    await gated.running;
    // The first request is provably still running; let its lease run out four times over.
    await vi.advanceTimersByTimeAsync(240);
    const second = handle(post('k'));
    if (status === 201) {
      // Without renewal the retry takes over and blocks on the same gate. Its handler must have
      // started before the gate opens: opened earlier, the first request could complete before
      // the retry's claim (it did on Node 24, where reading the body takes more ticks) and the
      // retry would get a replay. If the retry never takes over, the test times out.
      await gated.started(2);
      gated.open();
    }
    const retry = await second;
    gated.open();
    await first;
    expect(retry.status).toBe(status);
    expect(gated.executions()).toBe(executions);
  });
});
