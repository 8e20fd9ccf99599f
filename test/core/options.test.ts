import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import { resolveOptions } from '../../src/core/options.js';
import { memoryStore } from '../../src/stores/memory.js';

const store = memoryStore({ sweepIntervalMs: 0 });

describe('resolveOptions', () => {
  it('fills in safe defaults', () => {
    const o = resolveOptions({ store });
    expect([...o.methods]).toEqual(['POST', 'PATCH']);
    expect(o).toMatchObject({ required: true, leaseMs: 30_000, windowMs: 86_400_000, inFlight: 'conflict', failOpen: false, transactional: false });
    expect(o.replayHeaders.has('set-cookie')).toBe(false);
    expect(o.replayHeaders.has('location')).toBe(true);
  });

  it.each([
    [{}, 'store'],
    [{ store, leaseMs: -1 }, 'leaseMs'],
    [{ store, leaseMs: 1.5 }, 'leaseMs'],
    [{ store, leaseMs: 3e9 }, 'leaseMs'],
    [{ store, storeTimeoutMs: 2 ** 31 }, 'storeTimeoutMs'],
    [{ store, windowMs: 0 }, 'windowMs'],
    [{ store, leaseMs: 60_000, windowMs: 1000 }, 'windowMs'],
    [{ store, methods: 'POST' }, 'methods'],
    [{ store, methods: ['PO ST'] }, 'methods'],
    [{ store, header: 'bad header' }, 'header'],
    [{ store, inFlight: 'queue' }, 'inFlight'],
    [{ store, maxBodyBytes: 0 }, 'maxBodyBytes'],
    [{ store, waitTimeoutMs: 'soon' }, 'waitTimeoutMs'],
    [{ store, replayHeaders: ['Set-Cookie'] }, 'replayHeaders'],
    [{ store, transactional: true }, 'transactional'],
    [{ store, required: 'yes' }, 'required'],
    [{ store, scope: 'tenant' }, 'scope'],
    [{ store, fingerprintFields: [] }, 'fingerprintFields'],
    [{ store, keyPolicy: { format: 'guid' } }, 'keyPolicy.format'],
    [{ store, keyPolicy: { minLength: 0 } }, 'keyPolicy.minLength'],
  ])('rejects %j naming `%s`', (options, name) => {
    let thrown: unknown;
    try {
      resolveOptions(options as never);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InvalidOptionError);
    expect((thrown as InvalidOptionError).option).toBe(name);
    expect((thrown as Error).message).toContain(`\`${name}\``);
  });
});
