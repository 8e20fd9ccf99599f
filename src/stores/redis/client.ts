/**
 * What the Redis store reads of the ioredis client it is given: its options (the one warning about
 * settings that make an outage slow, its `keyPrefix`), its address for messages, and the
 * node-redis client it refuses.
 */
import type { IdempotencyLogger } from '../../core/logger.js';

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

/** True when ioredis would hold a command in its offline queue while disconnected (its default). */
export function queuesOffline(client: object): boolean {
  return clientOptions(client)?.own.enableOfflineQueue !== false;
}

/**
 * Warns once per client when its settings make an outage slow and late: with the offline queue
 * on, every request waits out `storeTimeoutMs` for its 503 and a queued claim runs after its
 * request was answered (its key then answers 409 for a lease); with `maxRetriesPerRequest` null
 * or above 1, a command is resent after each reconnect. A client without ioredis options (a
 * wrapper, a test double) is not judged.
 */
export function warnAboutClient(client: object, logger: IdempotencyLogger): void {
  const options = clientOptions(client);
  if (options === undefined || warned.has(client)) return;
  const cluster = typeof (client as { nodes?: unknown }).nodes === 'function';
  const problems: string[] = [];
  if (options.own.enableOfflineQueue !== false) {
    problems.push('enableOfflineQueue is on (commands wait in a queue while Redis is down: each request waits out storeTimeoutMs for its 503, and a queued claim runs after its request was answered)');
  }
  // ioredis's default is 20; a Cluster passes its `redisOptions` to each node.
  const retries = options.node.maxRetriesPerRequest === undefined ? 20 : options.node.maxRetriesPerRequest;
  if (retries === null || (typeof retries === 'number' && retries > MAX_QUIET_RETRIES)) {
    const many = retries === null ? 'without limit' : `up to ${retries} times`;
    problems.push(`maxRetriesPerRequest is ${String(retries)} (a command whose connection dropped is resent ${many} after reconnecting, long after its request was answered)`);
  }
  if (problems.length === 0) return;
  warned.add(client);
  const recommended = cluster
    ? 'new Cluster(nodes, { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } })'
    : 'new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true }), then await client.connect()';
  try {
    logger.warn(`idemkit: redisStore(): the ioredis client's ${problems.join('; and ')}. Recommended: ${recommended} (docs/stores/redis.md, "Client settings").`);
  } catch {
    /* a logger that throws must not fail the store's construction */
  }
}

/** `host:port` of an ioredis node, for messages. */
export function addressOf(node: object): string {
  const options = (node as { options?: { host?: unknown; port?: unknown; path?: unknown } }).options;
  if (typeof options?.path === 'string' && options.path !== '') return options.path;
  return typeof options?.host === 'string' && options.port !== undefined ? `${options.host}:${String(options.port)}` : 'the server';
}

/** The ioredis `keyPrefix` of a client (a `Redis`, or a `Cluster` through its node options), if any. */
export function keyPrefixOf(client: object): string | undefined {
  const options = (client as { options?: { keyPrefix?: unknown; redisOptions?: { keyPrefix?: unknown } } }).options;
  const keyPrefix = options?.keyPrefix ?? options?.redisOptions?.keyPrefix;
  return typeof keyPrefix === 'string' && keyPrefix !== '' ? keyPrefix : undefined;
}

/** A node-redis client has `sendCommand` where ioredis has `callBuffer`: say what to do with it. */
export function notIoredis(value: object): string | undefined {
  const candidate = value as { callBuffer?: unknown; sendCommand?: unknown };
  if (typeof candidate.callBuffer !== 'function' && typeof candidate.sendCommand === 'function') {
    return 'this looks like a node-redis client: redisStore needs ioredis (new Redis() from "ioredis"); node-redis works with the Redis patterns (oneTimeTokens, redisLock from idemkit/patterns)';
  }
  return undefined;
}
