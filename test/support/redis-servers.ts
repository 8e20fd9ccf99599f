/**
 * Throwaway redis-server processes for the Redis suites: a single server to pause, cut or kill
 * without touching the shared one on 6379, and a real 3-master Cluster. Every process is a child
 * of the test worker and is stopped by its pid.
 */
import { execFile, spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import type { RedisOptions } from 'ioredis';
import { createClient, createCluster } from 'redis';
import type { RedisStoreOptions } from '../../src/stores/redis/index.js';
import { sleep } from './until.js';
import { freePort, listensOn, retryOnPortTaken } from './ports.js';


/**
 * What the docs recommend for the store's client: fail a command at once while disconnected
 * instead of queueing it (a queued claim could run long after its request got its 503), and do
 * not resend a command whose connection dropped. See docs/stores/redis.md.
 */
export const STORE_CLIENT_OPTIONS: RedisOptions = { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true };

/** A connected client with the recommended options (connects first: it refuses commands until ready). */
export async function connectStoreClient(port: number, extra: RedisOptions = {}): Promise<Redis> {
  const client = new Redis({ host: '127.0.0.1', port, ...STORE_CLIENT_OPTIONS, ...extra });
  // Errors are answered per command; without a listener ioredis would print each reconnect failure.
  client.on('error', () => {});
  await client.connect();
  return client;
}

/** The two Redis clients the store takes: every Redis store suite runs on both. */
export type StoreClientLibrary = 'ioredis' | 'node-redis';
export const STORE_CLIENT_LIBRARIES: readonly StoreClientLibrary[] = ['ioredis', 'node-redis'];

/**
 * node-redis with what the docs recommend for it: a command fails at once while disconnected
 * (`disableOfflineQueue`), instead of waiting in its offline queue. Connected. `RESP` left out is
 * node-redis 6's default, RESP3.
 */
export async function connectNodeRedisStoreClient(port: number, { RESP }: { RESP?: 2 | 3 } = {}) {
  const client = createClient({ socket: { host: '127.0.0.1', port }, disableOfflineQueue: true, ...(RESP === undefined ? {} : { RESP }) });
  // node-redis throws an 'error' event nobody listens to: each reconnect failure would end the worker.
  client.on('error', () => {});
  await client.connect();
  return client;
}

/** A node-redis Cluster with the recommended setting on every node it connects to. Connected. */
export async function connectNodeRedisCluster(nodes: ReadonlyArray<{ host: string; port: number }>) {
  const cluster = createCluster({ rootNodes: nodes.map((socket) => ({ socket: { ...socket } })), defaults: { disableOfflineQueue: true } });
  cluster.on('error', () => {});
  await cluster.connect();
  return cluster;
}

/** An ioredis Cluster with the recommended settings (docs/stores/redis.md), ready. */
export async function connectIoredisCluster(nodes: ReadonlyArray<{ host: string; port: number }>): Promise<Cluster> {
  const client = new Cluster([...nodes], { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } });
  client.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    client.once('ready', resolve);
    client.once('end', () => reject(new Error('the cluster client gave up connecting')));
  });
  return client;
}

/** A store's client of either library, connected with the recommended settings, and how to let it go. */
export interface ConnectedStoreClient {
  readonly library: StoreClientLibrary;
  readonly client: RedisStoreOptions['client'];
  /** Calls `spy` with the name (lower case) and arguments of every command the client writes, until the returned function is called. */
  spy(spy: (name: string, args: readonly unknown[]) => void): () => void;
  /** True while the client is connected and answering commands. */
  isReady(): boolean;
  /** One command of the test's own on the store's connection (its text reply). */
  command(...args: string[]): Promise<unknown>;
  /** A client that answers SET with the syntax error of Redis before 7.0 (no NX with GET), counting them, and passes every other command on. */
  withoutSetNxGet(): { client: RedisStoreOptions['client']; sets: () => number };
  close(): void;
}

export async function connectStoreClientOf(library: StoreClientLibrary, port: number, extra: RedisOptions = {}): Promise<ConnectedStoreClient> {
  if (library === 'ioredis') {
    const client = await connectStoreClient(port, extra);
    return {
      library,
      client,
      spy(spy) {
        const send = client.sendCommand.bind(client);
        client.sendCommand = (command, stream) => {
          spy(command.name.toLowerCase(), command.args);
          return send(command, stream);
        };
        return () => void delete (client as { sendCommand?: unknown }).sendCommand;
      },
      isReady: () => client.status === 'ready',
      command: (name, ...args) => client.call(name, ...args),
      withoutSetNxGet() {
        let sets = 0;
        const old = {
          callBuffer: (command: string, ...args: Array<string | Buffer | number>) => {
            if (command === 'set') {
              sets++;
              return Promise.reject(new Error('ERR syntax error'));
            }
            return client.callBuffer(command, ...args);
          },
        };
        return { client: old, sets: () => sets };
      },
      close: () => client.disconnect(),
    };
  }
  const client = await connectNodeRedisStoreClient(port);
  return {
    library,
    client,
    spy(spy) {
      const send = client.sendCommand.bind(client);
      client.sendCommand = ((args: ReadonlyArray<string | Buffer>, options?: object) => {
        spy(String(args[0]).toLowerCase(), args.slice(1));
        return send(args, options);
      }) as typeof client.sendCommand;
      return () => void delete (client as { sendCommand?: unknown }).sendCommand;
    },
    isReady: () => client.isReady,
    command: (...args) => client.sendCommand(args),
    withoutSetNxGet() {
      let sets = 0;
      const old = {
        sendCommand: (args: ReadonlyArray<string | Buffer>, options?: object) => {
          if (args[0] === 'SET') {
            sets++;
            return Promise.reject(new Error('ERR syntax error'));
          }
          return client.sendCommand(args, options);
        },
        withTypeMapping: () => old,
      };
      return { client: old, sets: () => sets };
    },
    close: () => client.destroy(),
  };
}

/**
 * True when `redis-server` and `redis-cli` are on PATH. Under CI=true their absence fails the run;
 * elsewhere the suites that need them are skipped with a loud line.
 */
export function requireRedisBinaries(): boolean {
  const ok = ['redis-server', 'redis-cli'].every((bin) => spawnSync(bin, ['--version'], { stdio: 'ignore' }).status === 0);
  if (ok) return true;
  const line = 'redis-server/redis-cli are not on PATH (apt-get install redis-server)';
  if (process.env.CI === 'true') throw new Error(`CI=true and ${line}`);
  console.warn(`\n!!!!!!!! SKIPPING REDIS CLUSTER AND OUTAGE SUITES: ${line}\n`);
  return false;
}


export interface RedisServer {
  readonly port: number;
  readonly pid: number;
  readonly process: ChildProcess;
  /** Stops the process by its pid and waits until it has exited. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

// A worker that dies without running its afterAll must not leave servers behind.
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) if (child.exitCode === null) child.kill('SIGKILL');
});

/**
 * Starts a throwaway redis-server. Without `options.port` it takes a free port, and takes another
 * when the one it took was grabbed in between (another worker's server, or an outgoing connection's
 * ephemeral port): a free port is only free until someone binds it.
 */
export async function startRedisServer(options: { port?: number; dir: string; args?: readonly string[] }): Promise<RedisServer> {
  if (options.port !== undefined) return spawnRedisServer(options.port, options.dir, options.args ?? []);
  return retryOnPortTaken(async () => spawnRedisServer(await freePort(), options.dir, options.args ?? []));
}

async function spawnRedisServer(port: number, dir: string, extraArgs: readonly string[]): Promise<RedisServer> {
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--dir', dir];
  const child = spawn('redis-server', [...args, ...extraArgs], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const collect = (chunk: Buffer) => void (log = (log + chunk.toString()).slice(-4000));
  child.stdout!.on('data', collect);
  child.stderr!.on('data', collect);
  live.add(child);
  const exited = once(child, 'exit').finally(() => live.delete(child));
  try {
    await waitForPong(port, child, () => log);
  } catch (error) {
    if (child.exitCode === null) child.kill('SIGKILL');
    throw error;
  }
  return {
    port,
    pid: child.pid!,
    process: child,
    async stop(signal = 'SIGKILL') {
      if (child.exitCode !== null || child.signalCode !== null) return;
      process.kill(child.pid!, signal);
      await exited;
    },
  };
}

async function waitForPong(port: number, child: ChildProcess, log: () => string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`redis-server on port ${port} exited early:\n${log()}`);
    const probe = new Redis({ host: '127.0.0.1', port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on('error', () => {});
    try {
      await probe.connect();
      // Its own PONG: another worker's redis-server may have taken the port this one is failing to bind.
      if ((await probe.ping()) === 'PONG' && listensOn(child.pid!, port)) return;
    } catch {
      // not listening yet
    } finally {
      probe.disconnect();
    }
    await sleep(50);
  }
  throw new Error(`redis-server on port ${port} did not answer within ${timeoutMs} ms:\n${log()}`);
}

export interface RedisClusterHandle {
  readonly nodes: ReadonlyArray<{ host: string; port: number }>;
  readonly servers: readonly RedisServer[];
  stop(): Promise<void>;
}

/**
 * Starts `masters` cluster-enabled servers on free ports, joins them with `redis-cli --cluster
 * create`, and waits until every node reports `cluster_state:ok`. The bus port is chosen
 * separately (`--cluster-port`, Redis 7) because port + 10000 may be out of range or taken.
 */
export async function startRedisCluster(masters = 3): Promise<RedisClusterHandle> {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-redis-cluster-'));
  const servers: RedisServer[] = [];
  const stop = async () => {
    await Promise.all(servers.map((s) => s.stop('SIGKILL')));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < masters; i++) {
      servers.push(
        await retryOnPortTaken(async () => {
          const port = await freePort();
          let bus = await freePort();
          // Two asks in a row may get the same port back, since the first was closed again.
          while (bus === port) bus = await freePort();
          const clusterArgs = ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`), '--cluster-port', String(bus)];
          return spawnRedisServer(port, dir, [...clusterArgs, '--cluster-node-timeout', '5000']);
        }),
      );
    }
    const addresses = servers.map((s) => `127.0.0.1:${s.port}`);
    await promisify(execFile)('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'], {
      timeout: 30_000,
    });
    await Promise.all(servers.map((s) => waitForClusterOk(s.port)));
  } catch (error) {
    await stop();
    throw error;
  }
  return { nodes: servers.map((s) => ({ host: '127.0.0.1', port: s.port })), servers, stop };
}

async function waitForClusterOk(port: number, timeoutMs = 20_000): Promise<void> {
  const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true });
  client.on('error', () => {});
  await client.connect();
  try {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const info = String(await client.call('CLUSTER', 'INFO'));
      if (info.includes('cluster_state:ok') && info.includes('cluster_slots_ok:16384')) return;
      await sleep(100);
    }
    throw new Error(`the cluster node on port ${port} did not reach cluster_state:ok within ${timeoutMs} ms`);
  } finally {
    client.disconnect();
  }
}

/** Deletes every key matching `pattern` on one server (for a Cluster, call it per master). */
export async function deleteKeys(client: Redis, pattern: string): Promise<number> {
  let cursor = '0';
  let deleted = 0;
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    // One UNLINK per key: in a Cluster node, keys of different slots cannot share a command.
    for (const key of keys) deleted += await client.unlink(key);
  } while (cursor !== '0');
  return deleted;
}

export { sleep };
