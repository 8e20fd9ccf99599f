/**
 * `store.verify()` on the Redis store, against the real Redis on 6379: it passes on a server that
 * can run the store, and each failure it names is provoked for real where Redis allows it (an ACL
 * user without scripting, one without the store's keys, EVALSHA renamed away on a server of our
 * own, a closed port, an ioredis keyPrefix); only a server older than Redis 5 is played by a fake.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster, Redis } from 'ioredis';
import type { RedisOptions } from 'ioredis';
import { createClient, createCluster } from 'redis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { StoreIncompatibleError, StoreUnavailableError } from '../../src/core/errors.js';
import type { RedisArgument } from '../../src/drivers/redis.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { RedisClient } from '../../src/stores/redis/store.js';
import { keySlot } from '../../src/stores/redis/keys.js';
import { CHECKPOINT, CLAIM, COMPLETE, READ, REAP, RELEASE, RENEW } from '../../src/stores/redis/lua.js';
import type { RedisServer } from '../support/redis-servers.js';
import { connectNodeRedisStoreClient, connectStoreClient, requireRedisBinaries, STORE_CLIENT_OPTIONS, startRedisServer } from '../support/redis-servers.js';
import { freePort } from '../support/ports.js';
import { REDIS, requireService } from '../support/services.js';

const up = await requireService(REDIS);
const binaries = up && requireRedisBinaries();
/** This run's key prefix and ACL user names: unique, so parallel runs never share them. */
const RUN = `idemkit-verify-${randomUUID().slice(0, 8)}`;

/** What verify() threw (it must throw). */
async function refusal(promise: Promise<void>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('verify() passed');
}

describe.skipIf(!up)('redisStore verify() on Redis 6379', () => {
  let admin: Redis;
  const users: string[] = [];
  const clients: Redis[] = [];
  const connect = async (extra: RedisOptions = {}) => {
    const client = await connectStoreClient(REDIS.port, extra);
    clients.push(client);
    return client;
  };
  /** An ACL user of this run, with a password, and `rules` beyond `on`. */
  const aclUser = async (suffix: string, rules: string[]) => {
    const name = `${RUN}-${suffix}`;
    const password = randomUUID();
    users.push(name);
    await admin.call('ACL', 'SETUSER', name, 'reset', 'on', `>${password}`, ...rules);
    return { username: name, password };
  };

  beforeAll(async () => {
    admin = await connectStoreClient(REDIS.port);
  });
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    if (users.length > 0) await admin.call('ACL', 'DELUSER', ...users);
    admin.disconnect();
  });

  it('passes on a server that can run the store, and leaves no key behind', async () => {
    const store = redisStore({ client: admin, prefix: RUN });
    await expect(store.verify()).resolves.toBeUndefined();
    expect(await admin.keys(`${RUN}*`)).toEqual([]);
    // It loaded every script: a cache flush is not needed for EVALSHA to find them afterwards.
    const claim = await store.claim({ scope: 't', key: 'k' }, 'fp', { leaseMs: 5_000, windowMs: 60_000 });
    expect(claim.kind).toBe('acquired');
    await admin.del(store.keyOf({ scope: 't', key: 'k' }));
  });

  it('an ACL user without scripting: StoreIncompatibleError naming SCRIPT LOAD and the ACL fix', async () => {
    const client = await connect(await aclUser('noscript', [`~${RUN}:*`, '+@all', '-@scripting']));
    const error = await refusal(redisStore({ client, prefix: RUN }).verify());
    expect(error).toBeInstanceOf(StoreIncompatibleError);
    expect(error).toMatchObject({ code: 'ERR_IDEMKIT_STORE_INCOMPATIBLE', reason: 'scripting-refused' });
    expect(error.message).toContain(`Redis at 127.0.0.1:${REDIS.port} refuses SCRIPT LOAD (the claim script) to this connection's ACL user (NOPERM`);
    expect(error.message).toContain('ACL SETUSER <user> +@scripting');
  });

  it("an ACL user whose key patterns leave out the prefix: StoreIncompatibleError naming the pattern to allow", async () => {
    const client = await connect(await aclUser('otherkeys', ['~elsewhere:*', '+@all']));
    const error = await refusal(redisStore({ client, prefix: RUN }).verify());
    expect(error).toMatchObject({ code: 'ERR_IDEMKIT_STORE_INCOMPATIBLE', reason: 'keys-refused' });
    expect(error.message).toContain(`refuses the store's keys to this connection's ACL user (EVALSHA (the read script): NOPERM`);
    expect(error.message).toContain(`ACL SETUSER <user> ~${RUN}:*`);
  });

  it('an ACL user refused INFO still verifies (the version is then not read)', async () => {
    const client = await connect({ ...(await aclUser('noinfo', [`~${RUN}:*`, '+@all', '-info'])), enableReadyCheck: false });
    await expect(redisStore({ client, prefix: RUN }).verify()).resolves.toBeUndefined();
  });

  it('a client pointed at a closed port: StoreUnavailableError naming PING and the address', async () => {
    const port = await freePort();
    const client = new Redis({ host: '127.0.0.1', port, ...STORE_CLIENT_OPTIONS });
    client.on('error', () => {});
    clients.push(client);
    const error = await refusal(redisStore({ client, prefix: RUN }).verify());
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error.message).toMatch(new RegExp(`^redis store: Redis at 127\\.0\\.0\\.1:${port} does not answer PING \\(`));
    expect(error.message).toContain('await client.connect() before verify()');
  });

  it('a client with ioredis defaults on a closed port: verify() rejects at its deadline (verifyTimeoutMs, 5 s by default), not when the client gives up', async () => {
    const port = await freePort();
    // ioredis's defaults: the offline queue holds PING until a connection comes, and 20 reconnects
    // (~10 s of back-off) pass before the queue is flushed with an error: verify() once took 73 s.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const client = new Redis({ host: '127.0.0.1', port });
    client.on('error', () => {});
    clients.push(client);
    const logger = { warn: vi.fn(), error: vi.fn() };
    let outcome: unknown;
    const verifying = redisStore({ client, prefix: RUN, logger })
      .verify()
      .then(
        () => (outcome = 'resolved'),
        (error: unknown) => (outcome = error),
      );
    await vi.advanceTimersByTimeAsync(4_999);
    expect(outcome).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    await verifying;
    expect(outcome).toBeInstanceOf(StoreUnavailableError);
    const message = (outcome as Error).message;
    expect(message).toContain(`redis store: verify() got no answer from Redis at 127.0.0.1:${port} within 5000 ms (option \`verifyTimeoutMs\`)`);
    expect(message).toContain('the client queues commands while it is disconnected (enableOfflineQueue)');
  });

  it('verifyTimeoutMs sets the deadline, and is checked when the store is made', async () => {
    expect(() => redisStore({ client: new Redis({ lazyConnect: true }), verifyTimeoutMs: 0, logger: quiet() })).toThrow(/verifyTimeoutMs/);
    expect(() => redisStore({ client: new Redis({ lazyConnect: true }), verifyTimeoutMs: 'soon' as never, logger: quiet() })).toThrow(/verifyTimeoutMs/);
    const port = await freePort();
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const client = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: null });
    client.on('error', () => {});
    clients.push(client);
    let outcome: unknown;
    const verifying = redisStore({ client, prefix: RUN, verifyTimeoutMs: 250, logger: quiet() })
      .verify()
      .catch((error: unknown) => (outcome = error));
    await vi.advanceTimersByTimeAsync(249);
    expect(outcome).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    await verifying;
    expect((outcome as Error).message).toContain('within 250 ms (option `verifyTimeoutMs`)');
  });

  it('an ioredis keyPrefix: StoreIncompatibleError saying to use the store’s prefix', async () => {
    const client = await connect({ keyPrefix: 'app:' });
    const error = await refusal(redisStore({ client, prefix: RUN }).verify());
    expect(error).toMatchObject({ reason: 'key-prefix' });
    expect(error.message).toContain('the ioredis client adds keyPrefix "app:" to every key');
    expect(error.message).toContain('give the store `prefix` instead');
  });
});

describe.skipIf(!up)('redisStore verify() through node-redis on Redis 6379', () => {
  let admin: Redis;
  const users: string[] = [];
  const closers: Array<() => void> = [];
  beforeAll(async () => {
    admin = await connectStoreClient(REDIS.port);
  });
  afterAll(async () => {
    for (const close of closers) close();
    if (users.length > 0) await admin.call('ACL', 'DELUSER', ...users);
    admin.disconnect();
  });
  /** A node-redis client of `url`, not connected; destroyed after the suite. */
  const nodeRedis = (options: Parameters<typeof createClient>[0]) => {
    const client = createClient(options);
    client.on('error', () => {});
    closers.push(() => void client.destroy());
    return client;
  };

  it('passes on a server that can run the store, loads every script and leaves no key behind', async () => {
    const client = await connectNodeRedisStoreClient(REDIS.port);
    closers.push(() => void client.destroy());
    await admin.script('FLUSH');
    const store = redisStore({ client, prefix: `${RUN}-nr` });
    await expect(store.verify()).resolves.toBeUndefined();
    expect(await admin.keys(`${RUN}-nr*`)).toEqual([]);
    expect(await admin.script('EXISTS', ...[CLAIM, RENEW, CHECKPOINT, COMPLETE, RELEASE, READ, REAP].map((s) => s.sha))).toEqual([1, 1, 1, 1, 1, 1, 1]);
  });

  it('an ACL user without scripting, given in the URL: the same StoreIncompatibleError, naming the address and never the password', async () => {
    const name = `${RUN}-nr-noscript`;
    const password = randomUUID();
    users.push(name);
    await admin.call('ACL', 'SETUSER', name, 'reset', 'on', `>${password}`, `~${RUN}:*`, '+@all', '-@scripting');
    const client = nodeRedis({ url: `redis://${name}:${password}@127.0.0.1:${REDIS.port}`, disableOfflineQueue: true });
    await client.connect();
    const error = await refusal(redisStore({ client, prefix: RUN }).verify());
    expect(error).toMatchObject({ code: 'ERR_IDEMKIT_STORE_INCOMPATIBLE', reason: 'scripting-refused' });
    expect(error.message).toContain(`Redis at 127.0.0.1:${REDIS.port} refuses SCRIPT LOAD (the claim script) to this connection's ACL user (NOPERM`);
    expect(error.message).not.toContain(password);
  });

  it('a client never connected: StoreUnavailableError naming PING, the address (not the URL) and client.connect()', async () => {
    const port = await freePort();
    const client = nodeRedis({ url: `redis://someone:hunter2-secret@127.0.0.1:${port}`, disableOfflineQueue: true });
    const error = await refusal(redisStore({ client, prefix: RUN }).verify());
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error.message).toMatch(new RegExp(`^redis store: Redis at 127\\.0\\.0\\.1:${port} does not answer PING \\(The client is closed\\)`));
    expect(error.message).toContain('await client.connect() before verify()');
    expect(error.message).not.toContain('hunter2');
    expect(error.message).not.toContain('redis://');
  });

  it('node-redis with its default offline queue on a closed port: verify() rejects at verifyTimeoutMs, naming disableOfflineQueue', async () => {
    const port = await freePort();
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const client = nodeRedis({ socket: { host: '127.0.0.1', port } });
    // Connecting (it retries for ever): PING waits in the offline queue meanwhile.
    client.connect().catch(() => {});
    let outcome: unknown;
    const verifying = redisStore({ client, prefix: RUN, verifyTimeoutMs: 250, logger: quiet() })
      .verify()
      .catch((error: unknown) => (outcome = error));
    await vi.advanceTimersByTimeAsync(249);
    expect(outcome).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    await verifying;
    expect(outcome).toBeInstanceOf(StoreUnavailableError);
    expect((outcome as Error).message).toContain(`verify() got no answer from Redis at 127.0.0.1:${port} within 250 ms (option \`verifyTimeoutMs\`); the client queues commands while it is disconnected (disableOfflineQueue is off)`);
  });
});

describe.skipIf(!binaries)('redisStore verify() on a server with EVALSHA renamed away', () => {
  let server: RedisServer;
  let client: Redis;
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-verify-'));
  beforeAll(async () => {
    server = await startRedisServer({ dir, args: ['--rename-command', 'EVALSHA', ''] });
    client = await connectStoreClient(server.port);
  });
  afterAll(async () => {
    client?.disconnect();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('StoreIncompatibleError naming the command and rename-command', async () => {
    const error = await refusal(redisStore({ client, prefix: RUN }).verify());
    expect(error).toMatchObject({ reason: 'scripting-refused' });
    expect(error.message).toContain(`Redis at 127.0.0.1:${server.port} does not know EVALSHA (the read script) (ERR unknown command`);
    expect(error.message).toContain('remove the rename-command of EVAL, EVALSHA and SCRIPT');
  });
});

/** A logger that keeps what it is told. */
function quiet() {
  return { warn: vi.fn(), error: vi.fn() };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('redisStore warns once about client settings that make an outage slow and late', () => {
  // lazyConnect: nothing connects, so no server is needed to read the client's settings.
  it('ioredis defaults: one warning naming enableOfflineQueue and maxRetriesPerRequest, and the recommended settings; none again for another store on the client', () => {
    const logger = quiet();
    const client = new Redis({ lazyConnect: true });
    redisStore({ client, logger });
    redisStore({ client, logger, prefix: 'other' });
    expect(logger.warn).toHaveBeenCalledTimes(1);
    expect(logger.error).not.toHaveBeenCalled();
    const line = String(logger.warn.mock.calls[0]![0]);
    expect(line).toMatch(/^idemkit: redisStore\(\): the ioredis client's enableOfflineQueue is on \(/);
    expect(line).toContain('maxRetriesPerRequest is 20 (a command whose connection dropped is resent up to 20 times');
    expect(line).toContain('Recommended: new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true })');
  });

  it('each risky setting alone is named: retries without limit, the offline queue', () => {
    const unlimited = quiet();
    redisStore({ client: new Redis({ lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: null }), logger: unlimited });
    expect(unlimited.warn).toHaveBeenCalledTimes(1);
    expect(String(unlimited.warn.mock.calls[0]![0])).toContain("client's maxRetriesPerRequest is null (a command whose connection dropped is resent without limit");
    expect(String(unlimited.warn.mock.calls[0]![0])).not.toContain('enableOfflineQueue is on');
    const queueing = quiet();
    redisStore({ client: new Redis({ lazyConnect: true, maxRetriesPerRequest: 0 }), logger: queueing });
    expect(queueing.warn).toHaveBeenCalledTimes(1);
    expect(String(queueing.warn.mock.calls[0]![0])).toContain("client's enableOfflineQueue is on");
    expect(String(queueing.warn.mock.calls[0]![0])).not.toContain('maxRetriesPerRequest is');
  });

  it('the recommended settings (and one resend) warn nothing, standalone or Cluster', () => {
    const logger = quiet();
    redisStore({ client: new Redis({ ...STORE_CLIENT_OPTIONS }), logger });
    redisStore({ client: new Redis({ lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 }), logger });
    redisStore({ client: new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true, enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } }), logger });
    expect(logger.warn).not.toHaveBeenCalled();
    expect(logger.error).not.toHaveBeenCalled();
  });

  it('a Cluster with its defaults: the warning gives the Cluster form of the settings', () => {
    const logger = quiet();
    redisStore({ client: new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true }), logger });
    expect(logger.warn).toHaveBeenCalledTimes(1);
    const line = String(logger.warn.mock.calls[0]![0]);
    expect(line).toContain('enableOfflineQueue is on');
    expect(line).toContain('maxRetriesPerRequest is 20');
    expect(line).toContain('Recommended: new Cluster(nodes, { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } })');
  });

  it('a logger without warn() is refused when the store is made, naming the option', () => {
    expect(() => redisStore({ client: new Redis({ ...STORE_CLIENT_OPTIONS }), logger: {} as never })).toThrow(/`logger`/);
  });
});

describe('redisStore warns once about node-redis settings that make an outage slow and late', () => {
  // Not connected: the settings are read from the client's options.
  it('node-redis defaults: one warning naming disableOfflineQueue and the recommended createClient(); none again for another store on the client', () => {
    const logger = quiet();
    const client = createClient({ url: 'redis://someone:hunter2-secret@127.0.0.1:6379' });
    redisStore({ client, logger });
    redisStore({ client, logger, prefix: 'other' });
    expect(logger.warn).toHaveBeenCalledTimes(1);
    const line = String(logger.warn.mock.calls[0]![0]);
    expect(line).toMatch(/^idemkit: redisStore\(\): the node-redis client's disableOfflineQueue is off \(commands wait in a queue while Redis is down/);
    expect(line).toContain('Recommended: createClient({ url, disableOfflineQueue: true }), then await client.connect()');
    expect(line).not.toContain('reconnectStrategy');
    expect(line).not.toContain('hunter2');
  });

  it('reconnectStrategy: false is named (the client would close for good at the first drop)', () => {
    const logger = quiet();
    redisStore({ client: createClient({ disableOfflineQueue: true, socket: { reconnectStrategy: false } }), logger });
    expect(logger.warn).toHaveBeenCalledTimes(1);
    const line = String(logger.warn.mock.calls[0]![0]);
    expect(line).toContain("the node-redis client's socket.reconnectStrategy is false (the client closes for good when its connection first drops");
    expect(line).not.toContain('disableOfflineQueue is off');
  });

  it('a Cluster: its node defaults are read, and the warning gives the createCluster() form', () => {
    const logger = quiet();
    const rootNodes = [{ socket: { host: '127.0.0.1', port: 1 } }];
    redisStore({ client: createCluster({ rootNodes }), logger });
    expect(logger.warn).toHaveBeenCalledTimes(1);
    const line = String(logger.warn.mock.calls[0]![0]);
    expect(line).toContain("the node-redis client's defaults.disableOfflineQueue is off");
    expect(line).toContain('Recommended: createCluster({ rootNodes, defaults: { disableOfflineQueue: true } }), then await cluster.connect()');
  });

  it('the recommended settings warn nothing, standalone or Cluster, RESP2 or RESP3', () => {
    const logger = quiet();
    redisStore({ client: createClient({ disableOfflineQueue: true }), logger });
    redisStore({ client: createClient({ disableOfflineQueue: true, RESP: 2 }), logger });
    redisStore({ client: createCluster({ rootNodes: [{ socket: { host: '127.0.0.1', port: 1 } }], defaults: { disableOfflineQueue: true } }), logger });
    expect(logger.warn).not.toHaveBeenCalled();
    expect(logger.error).not.toHaveBeenCalled();
  });
});

describe('redisStore verify() on a server before Redis 5 (a fake: none runs here)', () => {
  it('StoreIncompatibleError naming the version and the upgrade', async () => {
    const sent: string[] = [];
    const client: RedisClient = {
      async callBuffer(command: string, ...args: RedisArgument[]) {
        sent.push(command);
        if (command === 'ping') return 'PONG';
        if (command === 'info') return Buffer.from('# Server\r\nredis_version:4.0.14\r\nredis_mode:standalone\r\n');
        throw new Error(`unexpected ${command} ${args.join(' ')}`);
      },
    };
    const error = await refusal(redisStore({ client, prefix: RUN, coalesceWrites: false }).verify());
    expect(error).toMatchObject({ reason: 'server-version' });
    expect(error.message).toBe(
      'redis store: Redis at the server is version 4.0; the store needs Redis 5 or later (its scripts read TIME before they write, which older servers refuse); upgrade the server',
    );
    expect(sent).toEqual(['ping', 'info']);
  });
});

describe('keySlot', () => {
  it('is Redis’s CRC16 slot of the hash tag (the reference values of the Cluster specification)', () => {
    expect(keySlot('123456789')).toBe(0x31c3 % 16384);
    expect(keySlot('foo')).toBe(12182);
    expect(keySlot('{user1000}.following')).toBe(keySlot('user1000'));
    // CLUSTER KEYSLOT's documented examples.
    expect(keySlot('somekey')).toBe(11058);
    expect(keySlot('foo{hash_tag}')).toBe(2515);
    expect(keySlot('foo{{bar}}')).toBe(keySlot('{bar'));
  });
});
