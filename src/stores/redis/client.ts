/**
 * The client the Redis store is given, ioredis or node-redis, resolved once by `redisStore()` into
 * the few ways the store sends a command (`StoreClient`); and what it reads of that client's
 * options: the one warning about settings that make an outage slow, its address for messages, an
 * ioredis `keyPrefix`.
 */
import type { IdempotencyLogger } from '../../core/logger.js';
import type { NodeRedisClient, NodeRedisCluster, NodeRedisCommandOptions, RedisArgument, RedisBufferClient } from '../../drivers/redis.js';
import { sendBuffer, writeCoalescer } from '../../drivers/redis.js';

/** The commands the store sends. */
export type StoreCommand = 'evalsha' | 'eval' | 'scan' | 'set' | 'ping' | 'info' | 'script' | 'cluster';

/** One node of the store's Redis: the one server, or a master of a Cluster. */
export interface StoreNode {
  /** `host:port` (or a socket path), for messages: never the URL, which may hold a password. */
  readonly address: string;
  /** One command to this node; bulk replies as Buffers. `args` is the callee's: it may change it. */
  send(command: StoreCommand, args: RedisArgument[]): Promise<unknown>;
}

/** The store's client, whichever library made it. Every difference between them is settled here, once. */
export interface StoreClient {
  readonly library: 'ioredis' | 'node-redis';
  readonly cluster: boolean;
  /** The server's address, for messages (a Cluster's: "the Cluster"). */
  readonly address: string;
  /**
   * One command about `key` (on a Cluster, sent to the node of its slot); bulk replies as
   * Buffers. `args` is the whole command after its name, `key` among it, and the callee's.
   */
  readonly send: (command: StoreCommand, key: string, args: RedisArgument[]) => Promise<unknown>;
  /** Every master (the one server when standalone), for SCAN and `verify()`. */
  readonly masters: () => Promise<StoreNode[]>;
  /** `coalesceWrites` on this client: ioredis only (node-redis writes one turn's commands in one write by itself). */
  readonly coalescer: (() => void) | undefined;
  /**
   * The client's setting that holds commands while it is disconnected, named as its library
   * spells it, when it is so set (both libraries' default); undefined when commands fail at once.
   */
  readonly offlineQueue: () => string | undefined;
  /** An ioredis `keyPrefix` (node-redis's raw commands take none). */
  readonly keyPrefix: string | undefined;
}

/**
 * Which client `value` is, or why it is not one the store takes. ioredis has `callBuffer`;
 * node-redis 5 and 6 have `sendCommand` and `withTypeMapping` (4 has no per-command type
 * mapping, so its replies could not keep bodies as bytes); their Sentinel client is refused.
 * RESP2 and RESP3 (node-redis 6's default) both do: a script answers in RESP2's terms unless it
 * calls `redis.setresp(3)`, which the store's never do (a false is a nil either way, a true is
 * 1), and of the other replies only `INFO`'s changes type (a verbatim string, read as text).
 */
export function clientProblem(value: object): string | undefined {
  const candidate = value as { callBuffer?: unknown; sendCommand?: unknown; withTypeMapping?: unknown };
  if (typeof candidate.callBuffer === 'function') return undefined;
  if (typeof candidate.sendCommand !== 'function') return 'it has neither `callBuffer()` (ioredis) nor `sendCommand()` (node-redis)';
  if (typeof candidate.withTypeMapping !== 'function') return 'this looks like a node-redis client before version 5: upgrade to redis 5 or later (createClient() or createCluster()), or use ioredis';
  // Its sendCommand takes (isReadonly, args): not one of the two shapes above, and not tested here.
  if (typeof (value as { getSentinelNode?: unknown }).getSentinelNode === 'function') {
    return 'a node-redis Sentinel client (createSentinel()) is not supported: use ioredis, whose Redis follows a Sentinel-managed master (new Redis({ sentinels, name })), or a node-redis createClient() or createCluster()';
  }
  return undefined;
}

/** Resolves `client` (checked by `clientProblem`) into the store's ways of sending, once. */
export function storeClient(client: object, coalesceWrites: boolean): StoreClient {
  if (typeof (client as RedisBufferClient).callBuffer === 'function') return ioredisClient(client as RedisBufferClient, coalesceWrites);
  if (typeof (client as NodeRedisCluster).nodeClient === 'function') return nodeRedisCluster(client as NodeRedisCluster);
  return nodeRedisClient(client as NodeRedisClient);
}

function ioredisClient(client: RedisBufferClient, coalesceWrites: boolean): StoreClient {
  const cluster = typeof client.nodes === 'function';
  const node = (n: RedisBufferClient): StoreNode => ({ address: addressOf(n), send: (command, args) => sendBuffer(n, command, args) });
  return {
    library: 'ioredis',
    cluster,
    address: cluster ? 'the Cluster' : addressOf(client),
    // ioredis routes a Cluster's command by the keys it finds in it.
    send: (command, _key, args) => sendBuffer(client, command, args),
    masters: async () => (cluster ? client.nodes!('master').map(node) : [node(client)]),
    coalescer: coalesceWrites ? writeCoalescer(client) : undefined,
    offlineQueue: () => (clientOptions(client)?.own.enableOfflineQueue !== false ? 'enableOfflineQueue' : undefined),
    keyPrefix: keyPrefixOf(client),
  };
}

// Bulk strings (RESP type 36, `$`) as Buffers: response bodies are bytes, not text. One object,
// made once, passed with every command.
const BUFFERS: NodeRedisCommandOptions = { typeMapping: { 36: Buffer } };
// The same without node-redis 6's default command timeout (5 s): it arms an `AbortSignal.timeout`
// per command, which costs more CPU than the command itself (docs/performance.md). The store's
// operations have their own bounds (the middleware's `storeTimeoutMs`, `verifyTimeoutMs`, the
// completion's retry), as on ioredis, which has no command timeout by default. A timeout the
// application set in the client's `commandOptions` is kept.
const BUFFERS_UNTIMED: NodeRedisCommandOptions = { typeMapping: { 36: Buffer }, timeout: undefined };

/** The options each command is sent with: without a timeout unless the client's own `commandOptions` set one. */
function commandOptionsFor(options: NodeRedisOptions | undefined): NodeRedisCommandOptions {
  return typeof options?.commandOptions?.timeout === 'number' ? BUFFERS : BUFFERS_UNTIMED;
}
const NAMES: Readonly<Record<StoreCommand, string>> = { evalsha: 'EVALSHA', eval: 'EVAL', scan: 'SCAN', set: 'SET', ping: 'PING', info: 'INFO', script: 'SCRIPT', cluster: 'CLUSTER' };

/** node-redis takes the command as one array of strings and Buffers: `args`, its name put first, numbers as text. */
function commandOf(command: StoreCommand, args: RedisArgument[]): Array<string | Buffer> {
  args.unshift(NAMES[command]);
  for (let i = 1; i < args.length; i++) if (typeof args[i] === 'number') args[i] = String(args[i]);
  return args as Array<string | Buffer>;
}

function nodeRedisClient(client: NodeRedisClient): StoreClient {
  const options = nodeRedisOptions(client, false);
  const address = nodeAddress(options);
  const sent = commandOptionsFor(options);
  const send = (command: StoreCommand, args: RedisArgument[]) => client.sendCommand(commandOf(command, args), sent);
  return {
    library: 'node-redis',
    cluster: false,
    address,
    send: (command, _key, args) => send(command, args),
    masters: async () => [{ address, send }],
    coalescer: undefined,
    offlineQueue: () => nodeRedisQueue(options),
    keyPrefix: undefined,
  };
}

function nodeRedisCluster(cluster: NodeRedisCluster): StoreClient {
  const options = nodeRedisOptions(cluster, true);
  const sent = commandOptionsFor(options);
  return {
    library: 'node-redis',
    cluster: true,
    address: 'the Cluster',
    // Routed by `key`, the record's: a script's one key, or the SET's.
    send: (command, key, args) => cluster.sendCommand(key, false, commandOf(command, args), sent),
    masters: () =>
      Promise.all(
        cluster.masters.map(async (master) => {
          const node = (await cluster.nodeClient(master as never)) as NodeRedisClient;
          return { address: master.address, send: (command: StoreCommand, args: RedisArgument[]) => node.sendCommand(commandOf(command, args), sent) };
        }),
      ),
    coalescer: undefined,
    offlineQueue: () => nodeRedisQueue(options),
    keyPrefix: undefined,
  };
}

interface NodeRedisOptions {
  readonly url?: unknown;
  readonly socket?: { readonly host?: unknown; readonly port?: unknown; readonly path?: unknown; readonly reconnectStrategy?: unknown };
  readonly disableOfflineQueue?: unknown;
  readonly commandOptions?: { readonly timeout?: unknown };
}

/**
 * The options node-redis connects with: a client's own (`options`), or those a Cluster gives
 * every node client it makes (`defaults`: its `rootNodes` options serve only the first discovery).
 */
function nodeRedisOptions(client: object, cluster: boolean): NodeRedisOptions | undefined {
  const options = cluster ? (client as { _options?: { defaults?: unknown } })._options?.defaults : (client as { options?: unknown }).options;
  return typeof options === 'object' && options !== null ? (options as NodeRedisOptions) : undefined;
}

/** node-redis queues commands while disconnected unless `disableOfflineQueue` is true. */
function nodeRedisQueue(options: NodeRedisOptions | undefined): string | undefined {
  return options?.disableOfflineQueue === true ? undefined : 'disableOfflineQueue is off';
}

/** `host:port` of a node-redis client: from its socket options, or the host of its URL (never the URL: it may hold a password). */
function nodeAddress(options: NodeRedisOptions | undefined): string {
  const socket = options?.socket;
  if (typeof socket?.path === 'string') return socket.path;
  if (typeof socket?.host === 'string' || typeof socket?.port === 'number') return `${typeof socket.host === 'string' ? socket.host : 'localhost'}:${String(socket.port ?? 6379)}`;
  if (typeof options?.url === 'string') {
    try {
      const url = new URL(options.url);
      return `${url.hostname}:${url.port || '6379'}`;
    } catch {
      return 'the server';
    }
  }
  return 'localhost:6379';
}

// The clients already warned about: one line per client, however many stores share it.
const warned = new WeakSet<object>();
// A command resent more often than this after reconnects may run long after its request was answered.
const MAX_QUIET_RETRIES = 1;

/** The ioredis options of a client (a Cluster's own, and the node options it passes on), if it has any. */
function clientOptions(client: object): { own: Record<string, unknown>; node: Record<string, unknown> } | undefined {
  const own = (client as { options?: unknown }).options;
  if (typeof own !== 'object' || own === null) return undefined;
  const cluster = typeof (client as { nodes?: unknown }).nodes === 'function';
  const node = cluster ? (own as { redisOptions?: unknown }).redisOptions : own;
  return { own: own as Record<string, unknown>, node: typeof node === 'object' && node !== null ? (node as Record<string, unknown>) : {} };
}

/**
 * Warns once per client when its settings make an outage slow and late: with the offline queue
 * on (both libraries' default), every request waits out `storeTimeoutMs` for its 503 and a queued
 * claim runs after its request was answered (its key then answers 409 for a lease); with
 * ioredis's `maxRetriesPerRequest` null or above 1, a command is resent after each reconnect
 * (node-redis never resends a command it wrote: it fails it when the connection drops); with
 * node-redis's `reconnectStrategy: false`, the client closes for good at the first drop. An
 * ioredis client without options (a wrapper, a test double) is not judged.
 */
export function warnAboutClient(client: object, resolved: StoreClient, logger: IdempotencyLogger): void {
  if (warned.has(client)) return;
  const problems = resolved.library === 'node-redis' ? nodeRedisProblems(client, resolved) : ioredisProblems(client);
  if (problems === undefined || problems.length === 0) return;
  const recommended =
    resolved.library === 'node-redis'
      ? resolved.cluster
        ? 'createCluster({ rootNodes, defaults: { disableOfflineQueue: true } }), then await cluster.connect()'
        : 'createClient({ url, disableOfflineQueue: true }), then await client.connect()'
      : resolved.cluster
        ? 'new Cluster(nodes, { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } })'
        : 'new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true }), then await client.connect()';
  warned.add(client);
  try {
    logger.warn(`idemkit: redisStore(): the ${resolved.library} client's ${problems.join('; and ')}. Recommended: ${recommended} (docs/stores/redis.md, "Client settings").`);
  } catch {
    /* a logger that throws must not fail the store's construction */
  }
}

const QUEUED = '(commands wait in a queue while Redis is down: each request waits out storeTimeoutMs for its 503, and a queued claim runs after its request was answered)';

function ioredisProblems(client: object): string[] | undefined {
  const options = clientOptions(client);
  if (options === undefined) return undefined;
  const problems: string[] = [];
  if (options.own.enableOfflineQueue !== false) problems.push(`enableOfflineQueue is on ${QUEUED}`);
  // ioredis's default is 20; a Cluster passes its `redisOptions` to each node.
  const retries = options.node.maxRetriesPerRequest === undefined ? 20 : options.node.maxRetriesPerRequest;
  if (retries === null || (typeof retries === 'number' && retries > MAX_QUIET_RETRIES)) {
    const many = retries === null ? 'without limit' : `up to ${retries} times`;
    problems.push(`maxRetriesPerRequest is ${String(retries)} (a command whose connection dropped is resent ${many} after reconnecting, long after its request was answered)`);
  }
  return problems;
}

function nodeRedisProblems(client: object, resolved: StoreClient): string[] {
  const problems: string[] = [];
  const where = resolved.cluster ? 'defaults.' : '';
  if (resolved.offlineQueue() !== undefined) problems.push(`${where}disableOfflineQueue is off ${QUEUED}`);
  if (nodeRedisOptions(client, resolved.cluster)?.socket?.reconnectStrategy === false) {
    problems.push(`${where}socket.reconnectStrategy is false (the client closes for good when its connection first drops: every request answers 503 until the process restarts)`);
  }
  return problems;
}

/** `host:port` of an ioredis node, for messages. */
function addressOf(node: object): string {
  const options = (node as { options?: { host?: unknown; port?: unknown; path?: unknown } }).options;
  if (typeof options?.path === 'string' && options.path !== '') return options.path;
  return typeof options?.host === 'string' && options.port !== undefined ? `${options.host}:${String(options.port)}` : 'the server';
}

/** The ioredis `keyPrefix` of a client (a `Redis`, or a `Cluster` through its node options), if any. */
function keyPrefixOf(client: object): string | undefined {
  const options = (client as { options?: { keyPrefix?: unknown; redisOptions?: { keyPrefix?: unknown } } }).options;
  const keyPrefix = options?.keyPrefix ?? options?.redisOptions?.keyPrefix;
  return typeof keyPrefix === 'string' && keyPrefix !== '' ? keyPrefix : undefined;
}
