import { describe, expect, it } from 'vitest';
import type { Execution, WatchedResponse } from '../../src/core/engine.js';
import { IdempotencyEngine } from '../../src/core/engine.js';
import { memoryStore } from '../../src/stores/memory.js';

const facts = { method: 'POST', path: '/charges', contentType: 'application/json', body: Buffer.from('{}') };
const answer = { status: 201, headers: [], body: Buffer.from('{}'), bodyOmitted: false };

async function watchedExecution(key: string): Promise<{ execution: Execution; engine: IdempotencyEngine }> {
  const engine = new IdempotencyEngine({ store: memoryStore({ sweepIntervalMs: 0 }) });
  const admission = await engine.admit({}, key, facts);
  if (admission.kind !== 'execute') throw new Error(`expected execute, got ${admission.kind}`);
  const response: WatchedResponse = { writableFinished: false, destroyed: false };
  admission.execution.watchResponse(response);
  return { execution: admission.execution, engine };
}

/**
 * The Express adapter keeps its per-request state in a WeakMap keyed by the response, and the
 * state holds the execution: an execution that still pointed at its response after the request
 * would make that a cycle through an ephemeron, which V8's young-generation collector keeps alive
 * (every finished request then survives, and is copied by, each scavenge). Private state is read
 * here on purpose: the cycle has no behaviour a test could see, only a cost.
 */
const watched = (execution: Execution) => (execution as unknown as { response: WatchedResponse | undefined }).response;

describe('Execution lets go of its response when it ends', () => {
  it('on finish', async () => {
    const { execution } = await watchedExecution('finish');
    expect(watched(execution)).toBeDefined();
    await execution.finish(answer);
    expect(watched(execution)).toBeUndefined();
  });

  it('on abort', async () => {
    const { execution } = await watchedExecution('abort');
    await execution.abort();
    expect(watched(execution)).toBeUndefined();
  });

  it('on abandon', async () => {
    const { execution } = await watchedExecution('abandon');
    execution.abandon();
    expect(watched(execution)).toBeUndefined();
  });
});
