import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { IdemkitError, InvalidOptionError, LeaseLostError, StoreUnavailableError } from '../../src/core/errors.js';
import type { ClaimOptions, RecordRef, StoredResponse } from '../../src/core/store.js';
import type { RedisArgument } from '../../src/drivers/redis.js';
import type { RedisStore } from '../../src/stores/redis/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { RedisServer } from '../support/redis-servers.js';
import type { ConnectedStoreClient } from '../support/redis-servers.js';
import { STORE_CLIENT_LIBRARIES, connectNodeRedisStoreClient, connectStoreClient, connectStoreClientOf, deleteKeys, requireRedisBinaries, sleep, startRedisServer } from '../support/redis-servers.js';
import { REDIS, requireService } from '../support/services.js';
import { describeStoreContract } from './contract.js';

const up = await requireService(REDIS);
const binaries = up && requireRedisBinaries();
/** Every key this run writes starts with this, so the run can delete exactly its own keys. */
const RUN = `idemkit-test-${randomUUID().slice(0, 8)}`;
const opts = { leaseMs: 5_000, windowMs: 60_000 };
const ok: StoredResponse = { status: 201, headers: [['content-type', 'text/plain']], body: new TextEncoder().encode('ok'), bodyOmitted: false };

/** Records the name of every command the client writes to its connection (until the test's end). */
function commandLog(connected: ConnectedStoreClient): string[] {
  const names: string[] = [];
  onTestFinished(connected.spy((name) => void names.push(name)));
  return names;
}

/**
 * The record at `key`, read here byte by byte from its documented layout: [head, [fingerprint,
 * scope, key, …] (false → null), [status, headers, body_omitted, body as text]?].
 */
async function readRecord(redis: Redis, key: string): Promise<[string, unknown[], unknown[]?]> {
  const value = (await redis.getBuffer(key))!;
  const nl = value.indexOf('\n', 108);
  const rest = (JSON.parse(value.toString('utf8', 108, nl)) as unknown[]).map((v) => (v === false ? null : v));
  const head = value.toString('latin1', 0, 108);
  if (head[1] !== 'C') return [head, rest];
  const r = nl + 1;
  const headersEnd = r + 14 + Number(value.toString('latin1', r + 4, r + 14));
  const omitted = Number(value.toString('latin1', r + 3, r + 4));
  const body = omitted === 1 ? null : value.toString('utf8', headersEnd);
  return [head, rest, [Number(value.toString('latin1', r, r + 3)), value.toString('utf8', r + 14, headersEnd), omitted, body]];
}

/** Writes a record: `head`, then `rest` as JSON and a newline, then `response` [status, headers, omitted, body] in its layout. No TTL. */
async function writeRecord(redis: Redis, key: string, head: string, [rest, response]: unknown[]): Promise<void> {
  let tail = '';
  if (response !== undefined) {
    const [status, headers, omitted, body] = response as [unknown, string, number, string];
    tail = `${String(status).padStart(3, '0')}${omitted}${String(Buffer.byteLength(headers)).padStart(10, '0')}${headers}${body}`;
  }
  await redis.set(key, `${head}${JSON.stringify(rest)}\n${tail}`);
}

/** A record head: format 3, state, token, lease_until, expires_at, fresh TTL, attempt, client clock at creation. */
function recordHead(state: string, token = 't'.repeat(32), lease = 1, expires = 99_999_999_999_999, fresh = 0, attempt = 1, created = 0): string {
  const n = (v: number | string, width: number) => String(v).padStart(width, '0');
  return `3${state}${token}${n(lease, 16)}${n(expires, 16)}${n(fresh, 16)}${n(attempt, 10)}${n(created, 16)}`;
}

async function acquire(store: RedisStore, ref: RecordRef = { scope: 's', key: randomUUID() }, o: ClaimOptions = opts) {
  const claim = await store.claim(ref, 'fp', o);
  if (claim.kind !== 'acquired') throw new Error(`expected acquired, got ${claim.kind}`);
  return { ref, token: claim.token };
}

describe.skipIf(!up)('redis store (shared Redis on 6379)', () => {
  describeStoreContract('redis', async () => {
    const client = await connectStoreClient(REDIS.port);
    return {
      store: redisStore({ client, prefix: `${RUN}-contract`, maxResponseBytes: 256 * 1024 }),
      advance: sleep,
      close: async () => {
        await deleteKeys(client, `${RUN}-contract:*`);
        client.disconnect();
      },
    };
  });

  // The same store on node-redis (`redis` 5/6): the same scripts and records, its own client,
  // once with node-redis 6's default protocol (RESP3) and once with RESP2 (node-redis 5's).
  for (const RESP of [undefined, 2] as const) {
    const name = RESP === undefined ? 'redis via node-redis' : 'redis via node-redis with RESP: 2';
    describeStoreContract(name, async () => {
      const client = await connectNodeRedisStoreClient(REDIS.port, { RESP });
      const admin = await connectStoreClient(REDIS.port);
      const prefix = `${RUN}-node${RESP ?? ''}`;
      return {
        store: redisStore({ client, prefix, maxResponseBytes: 256 * 1024 }),
        advance: sleep,
        close: async () => {
          await deleteKeys(admin, `${prefix}:*`);
          admin.disconnect();
          client.destroy();
        },
      };
    });
  }

  // node-redis 6 arms an AbortSignal.timeout (5 s) for every command unless told otherwise; the
  // store sends its commands without one (its operations have their own bounds), except when the
  // application set a timeout in the client's commandOptions.
  it.each([
    ['no commandOptions: the store sends no timeout', undefined, { has: true, value: undefined }],
    ['commandOptions.timeout set: the client\'s is kept', { timeout: 1_500 }, { has: false, value: undefined }],
  ] as const)('node-redis command timeout, %s', async (_name, commandOptions, expected) => {
    const { createClient } = await import('redis');
    const client = createClient({ socket: { host: '127.0.0.1', port: REDIS.port }, disableOfflineQueue: true, ...(commandOptions ? { commandOptions } : {}) });
    client.on('error', () => {});
    await client.connect();
    const admin = await connectStoreClient(REDIS.port);
    const prefix = `${RUN}-timeout`;
    onTestFinished(async () => {
      await deleteKeys(admin, `${prefix}:*`);
      admin.disconnect();
      client.destroy();
    });
    const sent: object[] = [];
    const send = client.sendCommand.bind(client);
    const spied = Object.assign(Object.create(client) as typeof client, {
      sendCommand: (args: Parameters<typeof client.sendCommand>[0], options?: Parameters<typeof client.sendCommand>[1]) => {
        sent.push(options ?? {});
        return send(args, options);
      },
    });
    const store = redisStore({ client: spied, prefix });
    const { ref, token } = await acquire(store);
    await store.complete(ref, token, ok);
    expect(sent.length).toBe(2);
    for (const options of sent) {
      expect('timeout' in options).toBe(expected.has);
      expect((options as { timeout?: unknown }).timeout).toBe(expected.value);
      expect(options).toMatchObject({ typeMapping: { 36: Buffer } });
    }
  });

  // ioredis's auto-pipelining batches commands written in one tick (fewer syscalls under load);
  // under it `callBuffer` loses the command name, so the store must not depend on it.
  describeStoreContract('redis with enableAutoPipelining', async () => {
    const client = await connectStoreClient(REDIS.port, { enableAutoPipelining: true });
    return {
      store: redisStore({ client, prefix: `${RUN}-autopipe`, maxResponseBytes: 256 * 1024 }),
      advance: sleep,
      close: async () => {
        await deleteKeys(client, `${RUN}-autopipe:*`);
        client.disconnect();
      },
    };
  });

});

// Every test of the store's own behaviour, through each client it takes; `admin` (ioredis) reads
// and writes records byte by byte from outside.
for (const library of STORE_CLIENT_LIBRARIES) describe.skipIf(!up)(`redis store through ${library} (shared Redis on 6379)`, () => {
  let connected: ConnectedStoreClient;
  let client: ConnectedStoreClient['client'];
  let admin: Redis;
  let store: RedisStore;
  beforeAll(async () => {
    connected = await connectStoreClientOf(library, REDIS.port);
    client = connected.client;
    admin = await connectStoreClient(REDIS.port);
    store = redisStore({ client, prefix: RUN });
  });
  afterAll(async () => {
    await deleteKeys(admin, `${RUN}:*`);
    connected?.close();
    admin?.disconnect();
  });

  it('lays a record out as one string under <prefix>:{sha256}, with scope and key in it', async () => {
    const before = Date.now();
    const { ref, token } = await acquire(store, { scope: 'tenant}{', key: '{k}' });
    const key = store.keyOf(ref);
    expect(key).toMatch(new RegExp(`^${RUN}:\\{[0-9a-f]{64}\\}$`));
    expect(await admin.type(key)).toBe('string');
    // Fresh, as the claim's SET NX wrote it: lease and window as durations, and the key's TTL.
    const [freshHead, rest] = await readRecord(admin, key);
    const created = Number(freshHead.slice(92));
    expect(created).toBeGreaterThanOrEqual(before);
    expect(created).toBeLessThanOrEqual(Date.now());
    expect(freshHead).toBe(recordHead('I', token, 5_000, 60_000, 120_000, 1, created));
    expect(rest).toEqual(['fp', 'tenant}{', '{k}', null, null]);
    // Completing a fresh record flips its state and appends the response; the TTL stays.
    const other = await acquire(store);
    // The key's expiry as an absolute time: unchanged means the TTL stayed, whatever time passed.
    const expiry = async () => Number(await admin.call('PEXPIRETIME', store.keyOf(other.ref)));
    const expiresBefore = await expiry();
    await store.complete(other.ref, other.token, ok);
    const [completedHead, , stored] = await readRecord(admin, store.keyOf(other.ref));
    expect(completedHead.slice(0, 2)).toBe('3C');
    expect(completedHead.slice(66, 82)).toBe('0000000000120000'); // still fresh
    expect(stored).toEqual([201, '[["content-type","text/plain"]]', 0, 'ok']);
    expect(await expiry()).toBe(expiresBefore);
    // The first script to write it stores times on the Redis clock.
    const [seconds] = await admin.time();
    expect(await store.renew(ref, token, 5_000)).toBe(true);
    const [absolute] = await readRecord(admin, key);
    const record = (await store.get(ref))!;
    expect(record.leaseUntil).toBeGreaterThanOrEqual(Number(seconds) * 1000 + 5_000);
    expect(absolute).toBe(recordHead('I', token, record.leaseUntil, record.expiresAt, 0, 1, 0));
    await store.complete(ref, token, ok);
    const [done, , response] = await readRecord(admin, key);
    expect(done.slice(0, 2)).toBe('3C');
    expect(response).toEqual([201, '[["content-type","text/plain"]]', 0, 'ok']);
    // Pairs that would collide under naive concatenation get different keys.
    expect(store.keyOf({ scope: 'a', key: 'bc' })).not.toBe(store.keyOf({ scope: 'ab', key: 'c' }));
    expect(store.keyOf({ scope: 'a","b', key: 'c' })).not.toBe(store.keyOf({ scope: 'a', key: 'b","c' }));
  });

  it('keeps createdAt and updatedAt at the end of the JSON; a record of an earlier idemkit reads as unknown times', async () => {
    // Fresh from the claim's SET NX: no times of its own, its creation read from its TTL.
    const { ref, token } = await acquire(store);
    const key = store.keyOf(ref);
    expect((await readRecord(admin, key))[1]).toHaveLength(5);
    const fresh = (await store.admin.inspect(ref))!;
    expect(fresh.createdAt).toBe(fresh.updatedAt);
    expect(fresh.createdAt!).toBeLessThanOrEqual(fresh.now);
    expect(fresh.createdAt!).toBeGreaterThan(fresh.now - 60_000);
    // get() reads the same times, in its one script call.
    expect(await store.get(ref)).toMatchObject({ createdAt: fresh.createdAt, updatedAt: fresh.updatedAt });
    // The first script to write it makes it absolute, and keeps that creation in its times.
    await sleep(5);
    expect(await store.renew(ref, token, 5_000)).toBe(true);
    const [, renewed] = await readRecord(admin, key);
    expect(renewed).toHaveLength(6);
    expect(renewed[5]).toMatch(/^\d{32}$/);
    const renewedAt = (await store.admin.inspect(ref))!;
    expect(renewedAt.createdAt).toBe(fresh.createdAt);
    expect(Number(String(renewed[5]).slice(0, 16))).toBe(fresh.createdAt);
    expect(renewedAt.updatedAt).toBe(Number(String(renewed[5]).slice(16)));
    expect(renewedAt.updatedAt!).toBeGreaterThan(fresh.updatedAt!);
    expect(await store.get(ref)).toMatchObject({ createdAt: renewedAt.createdAt, updatedAt: renewedAt.updatedAt });

    // Written by an earlier idemkit: absolute, its JSON without times.
    const t = (await store.admin.stats()).now;
    const oldToken = 'o'.repeat(32);
    const running = { scope: 's', key: randomUUID() };
    await writeRecord(admin, store.keyOf(running), recordHead('I', oldToken, t + 60_000, t + 120_000), [['fp', running.scope, running.key, false, false]]);
    expect(await store.admin.inspect(running)).toMatchObject({ state: 'in_flight', createdAt: null, updatedAt: null });
    // get() leaves them undefined (never 0, never 1970).
    const oldRunning = await store.get(running);
    expect(oldRunning).toMatchObject({ state: 'in_flight', fingerprint: 'fp' });
    expect(oldRunning!.createdAt).toBeUndefined();
    expect(oldRunning!.updatedAt).toBeUndefined();
    // Its in-flight answer cannot say how long ago its owner last wrote.
    const unknownAge = await store.claim(running, 'fp', opts);
    expect(unknownAge).toMatchObject({ kind: 'in_flight' });
    expect(unknownAge.kind === 'in_flight' && unknownAge.renewedMsAgo).toBeUndefined();
    // Its first write adds the times: the change is known, the creation stays unknown.
    await store.checkpoint(running, oldToken, 'charged', { id: 1 });
    const [, checkpointed] = await readRecord(admin, store.keyOf(running));
    expect(checkpointed.slice(0, 5)).toEqual(['fp', running.scope, running.key, 'charged', '{"id":1}']);
    const afterCheckpoint = (await store.admin.inspect(running))!;
    expect(afterCheckpoint).toMatchObject({ createdAt: null, recoveryPoint: 'charged', recoveryData: { id: 1 } });
    expect(afterCheckpoint.updatedAt!).toBeGreaterThanOrEqual(t);
    const checkpointedGet = await store.get(running);
    expect(checkpointedGet!.createdAt).toBeUndefined();
    expect(checkpointedGet!.updatedAt).toBe(afterCheckpoint.updatedAt);
    const knownAge = await store.claim(running, 'fp', opts);
    expect(knownAge.kind === 'in_flight' && knownAge.renewedMsAgo).toBeGreaterThanOrEqual(0);
    await sleep(5);
    await store.complete(running, oldToken, ok);
    expect(await store.claim(running, 'fp', opts)).toMatchObject({ kind: 'completed', response: { status: 201 } });
    const afterComplete = (await store.admin.inspect(running))!;
    expect(afterComplete.createdAt).toBeNull();
    expect(afterComplete.updatedAt!).toBeGreaterThan(afterCheckpoint.updatedAt!);
    // A completed one replays as before, shows unknown times, and olderThanMs judges it by its lease.
    const done = { scope: `old-${randomUUID()}`, key: 'done' };
    await writeRecord(admin, store.keyOf(done), recordHead('C', oldToken, t - 1_000, t + 120_000), [['fp', done.scope, done.key, false, false], [201, '[]', 0, 'ok']]);
    expect(await store.claim(done, 'fp', opts)).toMatchObject({ kind: 'completed', response: { status: 201 } });
    expect(await store.admin.inspect(done)).toMatchObject({ state: 'completed', createdAt: null, updatedAt: null });
    expect((await store.admin.list({ scope: done.scope, olderThanMs: 0 })).map((r) => r.key)).toEqual(['done']);
    expect(await store.admin.list({ scope: done.scope, olderThanMs: 60_000 })).toEqual([]);
  });

  it('costs one command per claim, completion and replay: SET NX GET claims and replays, no script', async () => {
    const sent = commandLog(connected);
    const ref = { scope: 's', key: randomUUID() };
    const claim = await store.claim(ref, 'fp', opts);
    expect(sent).toEqual(['set']);
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    await store.complete(ref, claim.token, ok);
    expect(sent).toEqual(['set', 'evalsha']);
    expect((await store.claim(ref, 'fp', opts)).kind).toBe('completed');
    expect((await store.claim(ref, 'other', opts)).kind).toBe('mismatch');
    expect(sent).toEqual(['set', 'evalsha', 'set', 'set']);
    // In flight, the answer needs the Redis clock (is the lease live?): the claim script decides.
    const busy = await acquire(store);
    expect((await store.claim(busy.ref, 'fp', opts)).kind).toBe('in_flight');
    expect(sent.slice(4)).toEqual(['set', 'set', 'evalsha']);
    // The record with its times (createdAt, updatedAt): the read script, one command.
    const record = await store.get(ref);
    expect(sent.slice(7)).toEqual(['evalsha']);
    expect(typeof record?.createdAt).toBe('number');
    expect(typeof record?.updatedAt).toBe('number');
  });

  it.runIf(library === 'ioredis')('coalesceWrites: commands sent from separate callbacks of one event-loop turn leave in one socket write', async () => {
    /** Socket writes for 20 claims issued by 20 timers that fire in the same timers phase. */
    async function socketWrites(coalesceWrites: boolean): Promise<number> {
      const own = await connectStoreClient(REDIS.port);
      try {
        const s = redisStore({ client: own, prefix: `${RUN}-coalesce`, coalesceWrites });
        await s.get({ scope: 's', key: 'warm-up' }); // loads the script, outside the count
        const socket = (own as unknown as { stream: Socket }).stream;
        let writes = 0;
        for (const method of ['_write', '_writev'] as const) {
          const original = socket[method]!.bind(socket) as (...args: unknown[]) => void;
          (socket as unknown as Record<string, unknown>)[method] = (...args: unknown[]) => {
            writes++;
            original(...args);
          };
        }
        // Between two timer callbacks Node runs the socket's write completion, so without
        // corking each callback's command is a write of its own.
        const claims = Array.from({ length: 20 }, () => new Promise((resolve) => setTimeout(() => resolve(s.claim({ scope: 's', key: randomUUID() }, 'fp', opts)), 0)));
        const results = (await Promise.all(claims)) as Array<{ kind: string }>;
        expect(results.every((r) => r.kind === 'acquired')).toBe(true);
        return writes;
      } finally {
        await deleteKeys(own, `${RUN}-coalesce:*`);
        own.disconnect();
      }
    }
    const plain = await socketWrites(false);
    const coalesced = await socketWrites(true);
    expect(plain).toBeGreaterThanOrEqual(10);
    expect(coalesced).toBeLessThanOrEqual(2);
  });

  it('answers from SET … GET only well inside the window; near its end the claim script decides', async () => {
    const sent = commandLog(connected);
    const { ref, token } = await acquire(store, undefined, { leaseMs: 1_000, windowMs: 60_000 });
    await store.complete(ref, token, ok);
    expect((await store.claim(ref, 'fp', opts)).kind).toBe('completed');
    expect((await store.claim(ref, 'other', opts)).kind).toBe('mismatch');
    expect(sent.splice(0)).toEqual(['set', 'evalsha', 'set', 'set']);
    // Near the end of the window by this process's clock (2 s before it, inside the 5 s margin),
    // the client no longer trusts it and asks the script, which decides on the Redis clock, where
    // the window is still open. (Moving the client's clock, not waiting: no time has to pass.)
    const spy = vi.spyOn(Date, 'now').mockReturnValue(Date.now() + 58_000);
    try {
      expect((await store.claim(ref, 'fp', opts)).kind).toBe('completed');
      expect((await store.claim(ref, 'other', opts)).kind).toBe('mismatch');
    } finally {
      spy.mockRestore();
    }
    expect(sent).toEqual(['set', 'evalsha', 'set', 'evalsha']);
  });

  it('stores and replays a record whose scope and key are not ASCII (the byte-by-byte encoding)', async () => {
    const ref = { scope: 'tenant-ü', key: '键-🔑-'.repeat(20) };
    const { token } = await acquire(store, ref);
    const [, rest] = await readRecord(admin, store.keyOf(ref));
    expect(rest).toEqual(['fp', ref.scope, ref.key, null, null]);
    await store.complete(ref, token, ok);
    const replay = await store.claim(ref, 'fp', opts);
    expect(replay.kind === 'completed' && new TextDecoder().decode(replay.response.body!)).toBe('ok');
    expect((await store.claim(ref, 'other', opts)).kind).toBe('mismatch');
  });

  it('stores a UTF-8 body as text and any other body as bytes, and both read back byte for byte, by the client and by the scripts', async () => {
    const bodies = [
      Buffer.from('€ 中文 😀 {"ok":true}'),
      Buffer.from('\ufeffwith a byte order mark'),
      Buffer.from([0xff, 0xfe, 0x00, 0x80]), // not UTF-8
      Buffer.from([0x61, 0xed, 0xa0, 0x80]), // an encoded surrogate: not UTF-8 either
      Buffer.alloc(0),
    ];
    // What each completion (EVALSHA sha 1 key grace token response) sent: was an argument a Buffer?
    const bufferArgs: boolean[] = [];
    const restore = connected.spy((name, args) => {
      if (name === 'evalsha' && args.length === 6) bufferArgs.push(args.some((a) => Buffer.isBuffer(a)));
    });
    try {
      for (const body of bodies) {
        const { ref, token } = await acquire(store);
        const response: StoredResponse = { status: 200, headers: [['x-note', 'ünïcode']], body: new Uint8Array(body), bodyOmitted: false };
        await store.complete(ref, token, response);
        const replay = await store.claim(ref, 'fp', opts); // decoded by the client, from SET … GET
        expect(replay.kind === 'completed' && Buffer.from(replay.response.body!)).toEqual(body);
        expect(replay.kind === 'completed' && replay.response.headers).toEqual([['x-note', 'ünïcode']]);
        const record = await store.get(ref); // decoded by the read script
        expect(Buffer.from(record!.response!.body!)).toEqual(body);
        const raw = (await admin.getBuffer(store.keyOf(ref)))!;
        expect(raw.subarray(raw.length - body.length)).toEqual(body);
      }
    } finally {
      restore();
    }
    // Only the two bodies that are not UTF-8 made the completion send a Buffer.
    expect(bufferArgs).toEqual([false, false, true, true, false]);
  });

  it('refuses to store a status that is not an HTTP status code, and leaves the record in flight', async () => {
    const { ref, token } = await acquire(store);
    await expect(store.complete(ref, token, { ...ok, status: 42 })).rejects.toThrow(/42 is not an HTTP status code/);
    expect((await store.get(ref))!.state).toBe('in_flight');
  });

  it('reads the lease of a fresh record from the TTL it was created with, whatever graceMs the reader has', async () => {
    const writer = redisStore({ client, prefix: RUN, graceMs: 600_000 });
    const reader = redisStore({ client, prefix: RUN, graceMs: 0 });
    const redisNow = async () => {
      const [seconds, micros] = await admin.time();
      return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    };
    const before = await redisNow();
    const { ref } = await acquire(writer, undefined, { leaseMs: 300, windowMs: 60_000 });
    const seen = await reader.get(ref);
    const after = await redisNow();
    expect(seen!.expiresAt - seen!.leaseUntil).toBe(60_000 - 300);
    // The lease the reader derives starts when the record was created, on the Redis clock: between
    // the two readings around the claim and the read (1 ms for rounding), however long they took.
    // A reader that used its own grace would place it ~600 s off.
    expect(seen!.leaseUntil).toBeGreaterThanOrEqual(before + 300 - 1);
    expect(seen!.leaseUntil).toBeLessThanOrEqual(after + 300 + 1);
    await sleep(400);
    expect(await reader.claim(ref, 'fp', opts)).toMatchObject({ kind: 'acquired', takeover: true });
  });

  it('on a server that refuses SET with both NX and GET (Redis before 7.0), every claim is a script', async () => {
    // Redis 6.2 answers this syntax error; the one here is 7, so a wrapper plays the older server.
    const old = connected.withoutSetNxGet();
    const s = redisStore({ client: old.client, prefix: RUN });
    const { ref, token } = await acquire(s);
    expect(old.sets()).toBe(1);
    await s.complete(ref, token, ok);
    expect((await s.claim(ref, 'fp', opts)).kind).toBe('completed');
    expect((await acquire(s)).token).toMatch(/^[0-9a-f]{32}$/);
    expect(old.sets()).toBe(1);
  });

  it("reads a fresh record's lease end the same on every read (from the key's expiry, not its remaining TTL)", async () => {
    // From PTTL and TIME the creation came out a millisecond apart from one read to the next, and
    // with it the lease's end: two records whose leases end together swapped places in admin.list.
    const { ref } = await acquire(store);
    const ends = new Set<number>();
    for (let i = 0; i < 60; i++) ends.add((await store.admin.inspect(ref))!.leaseUntil);
    expect([...ends]).toHaveLength(1);
  });

  it('survives SCRIPT FLUSH between operations (NOSCRIPT falls back to EVAL once)', async () => {
    const sent = commandLog(connected);
    const { ref, token } = await acquire(store);
    await admin.script('FLUSH');
    await store.complete(ref, token, ok);
    expect(sent).toEqual(['set', 'evalsha', 'eval']);
    await admin.script('FLUSH');
    const replay = await store.claim(ref, 'fp', opts); // SET NX GET: no script to miss
    expect(replay.kind === 'completed' && new TextDecoder().decode(replay.response.body!)).toBe('ok');
    expect(await store.renew(ref, token, 1000)).toBe(false);
    expect(sent.slice(3)).toEqual(['set', 'evalsha', 'eval']);
    // EVAL cached the script again: its next run is a single EVALSHA.
    expect(await store.renew(ref, token, 1000)).toBe(false);
    expect(sent.slice(6)).toEqual(['evalsha']);
    // The cache is per script: release was not cached again yet.
    const again = await acquire(store);
    await store.release(again.ref, again.token);
    expect(sent.slice(7)).toEqual(['set', 'evalsha', 'eval']);
    expect(await store.get(again.ref)).toBeUndefined();
  });

  it('reconnects after its connection is killed, and the next operation works', async () => {
    const own = await connectStoreClientOf(library, REDIS.port);
    const s = redisStore({ client: own.client, prefix: RUN });
    const { ref, token } = await acquire(s);
    const before = await own.command('CLIENT', 'ID');
    // Not events.once: node-redis first emits 'error' (the socket closed), which would reject it.
    const ready = new Promise((resolve) => (own.client as unknown as NodeJS.EventEmitter).once('ready', resolve));
    expect(await admin.client('KILL', 'ID', String(before))).toBe(1);
    await ready;
    await s.complete(ref, token, ok);
    expect((await s.claim(ref, 'fp', opts)).kind).toBe('completed');
    expect(await own.command('CLIENT', 'ID')).not.toBe(before);
    own.close();
  });

  it('reports a record that cannot be parsed with its Redis key and its idempotency key', async () => {
    const corrupt = async (setUp: (key: string) => Promise<unknown>, op: (ref: RecordRef) => Promise<unknown>, reason: RegExp) => {
      const ref = { scope: 'tenant', key: `corrupt-${randomUUID()}` };
      const key = store.keyOf(ref);
      await setUp(key);
      const error = await op(ref).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(IdemkitError);
      expect(error).toMatchObject({ code: 'ERR_IDEMKIT_CORRUPT_RECORD' });
      expect((error as Error).message).toContain(key);
      expect((error as Error).message).toContain(ref.key);
      expect((error as Error).message).toMatch(reason);
    };
    const rest = ['fp', 'tenant', 'k', false, false];
    await corrupt((k) => writeRecord(admin, k, recordHead('X'), [rest]), (r) => store.claim(r, 'fp', opts), /unknown state "X"/);
    await corrupt((k) => admin.set(k, 'a string'), (r) => store.claim(r, 'fp', opts), /not an idemkit record/);
    await corrupt((k) => admin.set(k, 'a string'), (r) => store.get(r), /not an idemkit record/);
    // A hash (as an earlier idemkit wrote records) is refused by the claim's SET … GET and by the scripts.
    await corrupt((k) => admin.hset(k, 'state', 'in_flight'), (r) => store.claim(r, 'fp', opts), /does not hold a string/);
    await corrupt((k) => admin.hset(k, 'state', 'in_flight'), (r) => store.get(r), /does not hold a string/);
    const soon = recordHead('I').replace(/9{14}/, 'soon'.padStart(14, '0'));
    await corrupt((k) => writeRecord(admin, k, soon, [rest]), (r) => store.complete(r, 't'.repeat(32), ok), /expires_at/);
    await corrupt((k) => writeRecord(admin, k, recordHead('I', undefined, 1, 2, 5_000), [rest]), (r) => store.get(r), /fresh record without its TTL/);
    await corrupt((k) => writeRecord(admin, k, recordHead('I'), [[false]]), (r) => store.claim(r, 'fp', opts), /fingerprint is missing/);
    await corrupt((k) => writeRecord(admin, k, recordHead('C'), [rest]), (r) => store.get(r), /response is missing/);
    // A response cut short (its headers' length runs past the value), or with a bad flag.
    await corrupt((k) => admin.set(k, `${recordHead('C')}["fp","tenant","k",false,false]\n2010000000099[]`), (r) => store.get(r), /response is missing/);
    await corrupt((k) => admin.set(k, `${recordHead('C')}["fp","tenant","k",false,false]\n2010000000099[]`), (r) => store.claim(r, 'fp', opts), /response is missing/);
    await corrupt((k) => writeRecord(admin, k, recordHead('C'), [rest, [201, '[]', 7, '']]), (r) => store.claim(r, 'fp', opts), /body_omitted/);
    await corrupt((k) => writeRecord(admin, k, recordHead('C'), [rest, [201, '{not json', 0, '']]), (r) => store.claim(r, 'fp', opts), /headers is not JSON/);
    await corrupt((k) => writeRecord(admin, k, recordHead('C'), [rest, [201, '[["a"]]', 0, '']]), (r) => store.get(r), /headers is not a list/);
    await corrupt((k) => writeRecord(admin, k, recordHead('C'), [rest, ['ok', '[]', 0, '']]), (r) => store.claim(r, 'fp', opts), /status/);
  });

  it('refuses a prefix that is not a plain name, and other bad options, naming the option', () => {
    for (const prefix of ['', 'has space', 'a{b', 'a}b', 'tab\there', 'nl\n', 'nul\u0000', 'star*', 'x'.repeat(65), 42]) {
      let error: unknown;
      try {
        redisStore({ client, prefix: prefix as string });
      } catch (e) {
        error = e;
      }
      expect(error, JSON.stringify(prefix)).toBeInstanceOf(InvalidOptionError);
      expect(error).toMatchObject({ option: 'prefix' });
    }
    expect(redisStore({ client, prefix: 'app:idem.v1-a_b' }).keyOf({ scope: '', key: 'k' })).toMatch(/^app:idem\.v1-a_b:\{/);
    expect(() => redisStore({} as never)).toThrow(/`client`/);
    expect(() => redisStore({ client: {} as never })).toThrow(/`client`/);
    expect(() => redisStore({ client, maxResponseBytes: -1 })).toThrow(/`maxResponseBytes`/);
    expect(() => redisStore({ client, maxResponseBytes: 1024 ** 3 })).toThrow(/`maxResponseBytes`/);
    expect(() => redisStore({ client, graceMs: 1.5 })).toThrow(/`graceMs`/);
    expect(() => redisStore({ client, completeRetryMs: -1 })).toThrow(/`completeRetryMs`/);
  });

  it('sets the TTL to the end of the record plus the grace: window or lease, whichever is later', async () => {
    const s = redisStore({ client, prefix: RUN, graceMs: 5_000 });
    const ttlEnd = async (ref: RecordRef) => Number(await admin.call('PEXPIRETIME', s.keyOf(ref)));
    // Compared exactly, never within a tolerance: a fresh record's times are derived from its TTL
    // at each read, so they are checked in its head (the TTL it was created with), and the TTL's
    // end against the times of records the scripts have made absolute.
    const longLease = await acquire(s, undefined, { leaseMs: 20_000, windowMs: 10_000 });
    const [freshHead] = await readRecord(admin, s.keyOf(longLease.ref));
    expect(freshHead.slice(34, 82)).toBe(['20000', '10000', '25000'].map((n) => n.padStart(16, '0')).join('')); // lease, window, TTL = lease + grace
    // Completed straight from its fresh form, the lease no longer holds it: it ends with its window.
    await s.complete(longLease.ref, longLease.token, ok);
    const completed = (await s.get(longLease.ref))!;
    expect(completed.expiresAt - completed.leaseUntil).toBe(10_000 - 20_000);
    expect(await ttlEnd(longLease.ref)).toBe(completed.expiresAt + 5_000);
    const { ref, token } = await acquire(s, undefined, { leaseMs: 1_000, windowMs: 10_000 });
    const [shortHead] = await readRecord(admin, s.keyOf(ref));
    expect(shortHead.slice(66, 82)).toBe('15000'.padStart(16, '0')); // TTL = window + grace
    const record = (await s.get(ref))!;
    expect(record.expiresAt - record.leaseUntil).toBe(9_000);
    expect(await s.renew(ref, token, 30_000)).toBe(true);
    const renewed = (await s.get(ref))!;
    expect(await ttlEnd(ref)).toBe(renewed.leaseUntil + 5_000);
    await s.complete(ref, token, ok);
    expect(await ttlEnd(ref)).toBe(renewed.expiresAt + 5_000);
    expect((await s.get(ref))!.expiresAt).toBe(renewed.expiresAt);
  });

  it('never lets Redis drop an in-flight record under a live lease after its window, and drops it itself after', async () => {
    const s = redisStore({ client, prefix: RUN, graceMs: 0 });
    const { ref, token } = await acquire(s, undefined, { leaseMs: 60_000, windowMs: 200 });
    await sleep(300); // window over, lease live (for a minute)
    expect((await s.claim(ref, 'fp', opts)).kind).toBe('in_flight');
    // Renewed past its window, the key lives exactly as long as the lease (no grace here)…
    expect(await s.renew(ref, token, 60_000)).toBe(true);
    const renewed = (await s.get(ref))!;
    expect(renewed.expiresAt).toBeLessThan(renewed.leaseUntil);
    expect(Number(await admin.call('PEXPIRETIME', s.keyOf(ref)))).toBe(renewed.leaseUntil);
    expect((await s.claim(ref, 'fp', opts)).kind).toBe('in_flight');
    // …so once the lease is over, Redis deletes it by itself.
    expect(await s.renew(ref, token, 300)).toBe(true);
    expect(Number(await admin.call('PEXPIRETIME', s.keyOf(ref)))).toBe((await s.get(ref))!.leaseUntil);
    await sleep(400);
    expect(await admin.exists(s.keyOf(ref))).toBe(0);
  });

  it('treats an expired record inside its grace as absent, shows it to get, and reaps it', async () => {
    const s = redisStore({ client, prefix: `${RUN}-grace`, graceMs: 60_000 });
    const { ref, token } = await acquire(s, undefined, { leaseMs: 100, windowMs: 200 });
    await s.checkpoint(ref, token, 'step-1');
    await s.complete(ref, token, ok);
    const live = await acquire(s);
    await sleep(300);
    expect((await s.get(ref))?.state).toBe('completed');
    await admin.set(`${RUN}-grace:{${'0'.repeat(64)}}`, 'not a record'); // matches the pattern, left alone
    expect(await s.reap(10)).toBe(1);
    expect(await s.get(ref)).toBeUndefined();
    expect((await s.get(live.ref))?.state).toBe('in_flight');
    expect(await admin.get(`${RUN}-grace:{${'0'.repeat(64)}}`)).toBe('not a record');
    await deleteKeys(admin, `${RUN}-grace:*`);
  });

  it('fences a take-over across operations: the earlier owner can neither renew nor complete', async () => {
    const { ref, token } = await acquire(store, undefined, { leaseMs: 100, windowMs: 60_000 });
    await sleep(150);
    const second = await store.claim(ref, 'fp', opts);
    expect(second).toMatchObject({ kind: 'acquired', takeover: true });
    expect(await store.renew(ref, token, 1000)).toBe(false);
    await expect(store.complete(ref, token, ok)).rejects.toBeInstanceOf(LeaseLostError);
    expect((await readRecord(admin, store.keyOf(ref)))[0].slice(82, 92)).toBe('0000000002'); // the attempt
  });
});

/**
 * A client that passes commands through, except the armed one: it is lost on the way to Redis
 * ('request'), or runs and its reply is lost ('reply'), as when a connection drops mid-command.
 */
function lossyClient(client: Redis) {
  let armed: 'request' | 'reply' | undefined;
  return {
    calls: 0,
    arm(what: 'request' | 'reply') {
      armed = what;
    },
    async callBuffer(command: string, ...args: RedisArgument[]): Promise<unknown> {
      this.calls++;
      const lose = armed;
      armed = undefined;
      if (lose === 'request') throw new Error('Connection is closed.');
      const reply = await client.callBuffer(command, ...args);
      if (lose === 'reply') throw new Error('Connection is closed.');
      return reply;
    },
  };
}

describe.skipIf(!up)('redis store completion retries', () => {
  let client: Redis;
  beforeAll(async () => {
    client = await connectStoreClient(REDIS.port);
  });
  afterAll(async () => {
    await deleteKeys(client, `${RUN}-retry:*`);
    client?.disconnect();
  });

  it.each(['request', 'reply'] as const)('stores the response exactly once when a completion’s %s is lost', async (lost) => {
    const lossy = lossyClient(client);
    const store = redisStore({ client: lossy, prefix: `${RUN}-retry` });
    const { ref, token } = await acquire(store);
    lossy.arm(lost);
    lossy.calls = 0;
    await store.complete(ref, token, ok);
    expect(lossy.calls).toBe(2);
    const record = await store.get(ref);
    expect(record?.state).toBe('completed');
    expect(new TextDecoder().decode(record!.response!.body!)).toBe('ok');
    // The "already stored by this token" answer is accepted only inside the call that retried.
    await expect(store.complete(ref, token, ok)).rejects.toBeInstanceOf(LeaseLostError);
  });

  it('reports a lost completion as store-unavailable when retries are off', async () => {
    const lossy = lossyClient(client);
    const store = redisStore({ client: lossy, prefix: `${RUN}-retry`, completeRetryMs: 0 });
    const { ref, token } = await acquire(store);
    lossy.arm('request');
    await expect(store.complete(ref, token, ok)).rejects.toBeInstanceOf(StoreUnavailableError);
    expect((await store.get(ref))?.state).toBe('in_flight');
  });

  it('stops retrying after completeRetryMs', async () => {
    let attempts = 0;
    const down = {
      callBuffer: () => {
        attempts++;
        return Promise.reject(new Error('Connection is closed.'));
      },
    };
    const reachable = redisStore({ client, prefix: `${RUN}-retry` });
    const { ref, token } = await acquire(reachable);
    // Fake timers and clock: the backoff (25, 50, 100, then what is left of 300 ms) runs on them.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    try {
      let outcome: unknown;
      const completing = redisStore({ client: down, prefix: `${RUN}-retry`, completeRetryMs: 300 })
        .complete(ref, token, ok)
        .then(
          () => (outcome = 'completed'),
          (error: unknown) => (outcome = error),
        );
      await vi.advanceTimersByTimeAsync(299);
      expect(outcome).toBeUndefined(); // still retrying just before completeRetryMs…
      expect(attempts).toBe(4); // at 0, 25, 75 and 175 ms
      await vi.advanceTimersByTimeAsync(1);
      await completing;
      expect(outcome).toBeInstanceOf(StoreUnavailableError); // …and given up at it, after one last try
      expect(attempts).toBe(5);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe.skipIf(!binaries)('redis store on a throwaway server', () => {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-redis-'));
  let server: RedisServer;
  let client: Redis;
  beforeAll(async () => {
    server = await startRedisServer({ dir });
    client = await connectStoreClient(server.port);
  });
  afterAll(async () => {
    client?.disconnect();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers a replay, an in-flight claim and a mismatch without writing anything', async () => {
    const store = redisStore({ client });
    // The server's dirty counter counts every write; nothing else talks to this server.
    const writes = async () => Number(/rdb_changes_since_last_save:(\d+)/.exec(await client.info('persistence'))![1]);
    const ref = { scope: 's', key: 'k' };
    const start = await writes();
    const claim = await store.claim(ref, 'fp', opts);
    expect(await writes()).toBeGreaterThan(start);
    const claimed = await writes();
    expect((await store.claim(ref, 'fp', opts)).kind).toBe('in_flight');
    expect((await store.claim(ref, 'other', opts)).kind).toBe('mismatch');
    expect(await writes()).toBe(claimed);
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    await store.complete(ref, claim.token, ok);
    const completed = await writes();
    expect(completed).toBeGreaterThan(claimed);
    expect((await store.claim(ref, 'fp', opts)).kind).toBe('completed');
    expect((await store.claim(ref, 'other', opts)).kind).toBe('mismatch');
    expect(await store.get(ref)).toMatchObject({ state: 'completed' });
    expect(await writes()).toBe(completed);
  });
});
