import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createIdempotentFetch, createRetryBudget } from '../../src/client/index.js';
import { InvalidOptionError } from '../../src/core/errors.js';
import { resolveOptions } from '../../src/core/options.js';
import { checkBoolean, checkDuration, checkInteger } from '../../src/core/option-reader.js';
import { amqpConsumeOnce, consumeOnce, migrateProcessed, natsConsumeOnce, reapProcessed, verifyWebhook, webhookHandler } from '../../src/messaging/index.js';
import { completer, definePhases, insertOnce, oneTimeTokens, redisLock, retryOnVersionConflict, sqlExecutor, transition, versionedUpdate } from '../../src/patterns/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { openSqlite } from '../support/sqlite-driver.js';

const store = memoryStore({ sweepIntervalMs: 0 });

describe('resolveOptions', () => {
  it('fills in safe defaults', () => {
    const o = resolveOptions({ store });
    expect([...o.methods]).toEqual(['POST', 'PATCH']);
    expect(o).toMatchObject({ required: true, leaseMs: 30_000, windowMs: 86_400_000, inFlight: 'conflict', retryAfterMs: 1_000, failOpen: false, transactional: false });
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
    [{ store, retryAfterMs: 0 }, 'retryAfterMs'],
    [{ store, retryAfterMs: 2 ** 31 }, 'retryAfterMs'],
    [{ store, retryAfterMs: '1s' }, 'retryAfterMs'],
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

/*
 * Every factory refuses an option nobody reads: a typo would otherwise run with the default. The
 * error names the key and points at the option that was meant. Fakes stand in for the drivers:
 * every factory refuses before it talks to one.
 */
describe('unknown options are refused with a hint, by every factory', () => {
  const fakePg = { query: async () => ({ rows: [] }), connect: async () => ({}) };
  const fakeMysql = { getConnection: async () => ({}), execute: async () => [[], []], query: async () => [[], []] };
  const fakeRedis = { callBuffer: async () => null, call: async () => null };
  const db = openSqlite(':memory:');
  const secret = 'whsec_' + randomBytes(24).toString('base64');
  const noop = async () => undefined;
  const webhook = { secret, consumer: 'c', onEvent: noop, store };

  const cases: Array<[string, () => unknown, string, string]> = [
    ['idempotency()', () => resolveOptions({ store, leaseMS: 5 } as never), 'leaseMS', 'leaseMs'],
    ['idempotency() keyPolicy', () => resolveOptions({ store, keyPolicy: { minLen: 8 } } as never), 'keyPolicy.minLen', 'minLength'],
    ['memoryStore()', () => memoryStore({ sweepInterval: 0 } as never), 'sweepInterval', 'sweepIntervalMs'],
    ['sqliteStore()', () => sqliteStore({ database: openSqlite(':memory:'), busyTimeout: 1 } as never), 'busyTimeout', 'busyTimeoutMs'],
    ['postgresStore()', () => postgresStore({ pool: fakePg, shema: 'x' } as never), 'shema', 'schema'],
    ['mysqlStore()', () => mysqlStore({ pool: fakeMysql, statementTimeout: 5 } as never), 'statementTimeout', 'statementTimeoutMs'],
    ['redisStore()', () => redisStore({ client: fakeRedis, perfix: 'x' } as never), 'perfix', 'prefix'],
    ['createIdempotentFetch()', () => createIdempotentFetch({ maxRetries: 3 } as never), 'maxRetries', 'retries'],
    ['createIdempotentFetch() retryBudget', () => createIdempotentFetch({ retryBudget: { capacty: 3 } } as never), 'retryBudget.capacty', 'capacity'],
    ['createRetryBudget()', () => createRetryBudget({ Ratio: 0.2 } as never), 'Ratio', 'ratio'],
    ['sqlExecutor()', () => sqlExecutor(db as never, { joind: true } as never), 'joind', 'joined'],
    ['oneTimeTokens()', () => oneTimeTokens(fakeRedis, { prefix: 't:', consume_with: 'script' } as never), 'consume_with', 'consumeWith'],
    ['redisLock()', () => redisLock(fakeRedis, { prefix: 'l:', prefx: 'x' } as never), 'prefx', 'prefix'],
    ['completer()', () => completer({ store: sqliteStore({ database: openSqlite(':memory:') }), phases: definePhases('p'), batchsize: 5 } as never), 'batchsize', 'batchSize'],
    ['consumeOnce()', () => consumeOnce({ store, consumer: 'c', messageId: 'm', leaseMS: 5 } as never, noop), 'leaseMS', 'leaseMs'],
    ['natsConsumeOnce()', () => natsConsumeOnce((async function* () {})(), { store, consumer: 'c', nakDelay: 5 } as never, noop), 'nakDelay', 'nakDelayMs'],
    ['amqpConsumeOnce()', () => amqpConsumeOnce({ consume: noop } as never, 'q', { store, consumer: 'c', requeu: false } as never, noop), 'requeu', 'requeue'],
    ['webhookReceiver()', () => webhookHandler({ ...webhook, onEvents: noop } as never), 'onEvents', 'onEvent'],
    ['verifyWebhook()', () => verifyWebhook(new Headers(), '', { secret, toleranceSecs: 5 } as never), 'toleranceSecs', 'toleranceSec'],
    ['reapProcessed()', () => reapProcessed(db as never, { limt: 5 } as never), 'limt', 'limit'],
    ['migrateProcessed()', () => migrateProcessed(db as never, { tabel: 'x' } as never), 'tabel', 'table'],
    ['insertOnce()', () => insertOnce(db as never, { table: 't', values: { a: 1 }, conflict: ['a'], conflicts: ['a'] } as never), 'conflicts', 'conflict'],
    ['transition()', () => transition(db as never, { table: 't', where: { id: 1 }, from: 'a', to: 'b', colum: 's' } as never), 'colum', 'column'],
    ['versionedUpdate()', () => versionedUpdate(db as never, { table: 't', where: { id: 1 }, expected: 1, set: { a: 1 }, versionColum: 'v' } as never), 'versionColum', 'versionColumn'],
    ['retryOnVersionConflict()', () => retryOnVersionConflict(noop, { retries: 1, maxBackoff: 5 } as never), 'maxBackoff', 'maxBackoffMs'],
  ];

  it.each(cases)('%s', async (_factory, make, key, meant) => {
    let thrown: unknown;
    try {
      await make();
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InvalidOptionError);
    expect(thrown).toMatchObject({ code: 'ERR_IDEMKIT_INVALID_OPTION', option: key });
    expect((thrown as Error).message).toContain(`\`${key}\`: unknown option; did you mean \`${meant}\`?`);
  });

  it('names what a call takes when nothing is close', () => {
    expect(() => memoryStore({ colour: 'red' } as never)).toThrow(/`colour`: unknown option; memoryStore\(\) takes `maxRecords`, .*`clock`/);
  });

  it('checks a lone value with the messages the reader gives', () => {
    expect(checkInteger('n', undefined, { default: 7, min: 1 })).toBe(7);
    expect(() => checkInteger('n', 0, { default: 7, min: 1 })).toThrow('Invalid option `n`: expected an integer >= 1, got 0');
    expect(checkBoolean('b', undefined, { default: true })).toBe(true);
    expect(() => checkBoolean('b', 1, { default: true })).toThrow('Invalid option `b`: expected a boolean, got number');
    expect(checkDuration('d', Infinity, { default: 5, min: 1, infinity: true })).toBe(Infinity);
    expect(() => checkDuration('d', Infinity, { default: 5, min: 1, infinity: false })).toThrow(/`d`: expected an integer >= 1, got Infinity/);
    expect(() => checkDuration('d', 2 ** 31, { default: 5, min: 1, infinity: true })).toThrow(/`d`: expected at most 2147483647 ms \(use Infinity for no limit\)/);
  });
});
