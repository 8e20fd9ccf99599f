/**
 * How idemkit talks to Redis. Only the shapes are declared: the client is the user's, and nothing
 * here imports `ioredis` or `redis`.
 */
import { createHash } from 'node:crypto';
import { InvalidOptionError } from '../core/errors.js';

export type RedisArgument = string | Buffer | number;

/**
 * A Redis client, as every part of idemkit sees it: the ways it can send a command, and two
 * optional capabilities. No client has all of them, so each user picks what it needs
 * (`RedisCaller`, `RedisClientLike`, `RedisBufferClient`).
 */
export interface RedisClient {
  /** ioredis (`Redis` or `Cluster`): one command, text replies. */
  call?(command: string, ...args: Array<string | number>): Promise<unknown>;
  /** ioredis: one command, bulk replies as Buffers. */
  callBuffer?(command: string, ...args: RedisArgument[]): Promise<unknown>;
  /** node-redis (`createClient()` of `redis` / `@redis/client`, standalone): one command as an array of strings. */
  sendCommand?(args: string[]): Promise<unknown>;
  /** An ioredis `Cluster`'s master nodes, to SCAN each. */
  nodes?(role: 'master'): Array<Required<Pick<RedisClient, 'callBuffer'>>>;
  /** A standalone ioredis client's socket (replaced on reconnect), which can hold writes back. */
  readonly stream?: { cork(): void; uncork(): void };
}

/** What the Redis guards need: one generic command call (ioredis `call`, or a forwarder). */
export type RedisCaller = Required<Pick<RedisClient, 'call'>>;

/** A node-redis client. */
export type RedisCommandSender = Required<Pick<RedisClient, 'sendCommand'>>;

/** What the Redis guards accept: an ioredis client, or a node-redis client. */
export type RedisClientLike = RedisCaller | RedisCommandSender;

/** A client with Buffer replies (ioredis), optionally a Cluster (`nodes`) or corkable (`stream`). */
export type RedisBufferClient = Required<Pick<RedisClient, 'callBuffer'>> & Pick<RedisClient, 'nodes' | 'stream'>;

/**
 * Command options of node-redis 5 and later: `typeMapping` turns a RESP type into a JavaScript
 * one, per command (the RESP type's code as the key: 36 is a bulk string).
 */
export interface NodeRedisCommandOptions {
  readonly typeMapping?: Readonly<Record<number, unknown>>;
  /** ms before node-redis rejects the command (its default 5,000, from node-redis 6); `undefined`: none. */
  readonly timeout?: number | undefined;
}

/** A standalone node-redis 5/6 client (`createClient()` of `redis` / `@redis/client`), as the Redis store uses it. */
export interface NodeRedisClient {
  sendCommand(args: ReadonlyArray<string | Buffer>, options?: NodeRedisCommandOptions): Promise<unknown>;
  /** Present from node-redis 5 (the version that has `typeMapping`). */
  withTypeMapping(typeMapping: never): unknown;
}

/** A node-redis 5/6 Cluster (`createCluster()`): a command is routed by the key it names first. */
export interface NodeRedisCluster {
  sendCommand(firstKey: string | Buffer | undefined, isReadonly: boolean | undefined, args: Array<string | Buffer>, options?: NodeRedisCommandOptions): Promise<unknown>;
  withTypeMapping(typeMapping: never): unknown;
  /** The masters it knows; `nodeClient(master)` connects to one. */
  readonly masters: ReadonlyArray<{ readonly address: string }>;
  nodeClient(node: never): Promise<unknown>;
}

/** The guards' one way of sending: `call` as is, node-redis' `sendCommand` adapted to it. */
export function redisCaller(redis: unknown, option = 'redis'): RedisCaller {
  if (typeof redis === 'object' && redis !== null) {
    if (typeof (redis as RedisCaller).call === 'function') return redis as RedisCaller;
    const sender = redis as RedisCommandSender;
    if (typeof sender.sendCommand === 'function') {
      // node-redis takes the command as one array of strings.
      return { call: (command, ...args) => sender.sendCommand([command, ...args.map(String)]) };
    }
  }
  throw new InvalidOptionError(option, 'expected an ioredis Redis or Cluster, or a node-redis client (call or sendCommand)');
}

/** A Lua script and its SHA-1, for EVALSHA. */
export interface Script {
  readonly source: string;
  readonly sha: string;
}

export function script(source: string): Script {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * Redis answers EVALSHA of a script it does not have (restart, failover, SCRIPT FLUSH, a new
 * Cluster node) with an error reply whose code is NOSCRIPT: the script did not run.
 */
export function isNoScript(error: unknown): boolean {
  return /^NOSCRIPT\b/.test(error instanceof Error ? error.message : String(error));
}

/**
 * EVALSHA, then EVAL when the server does not have the script: safe, since it did not run, and
 * EVAL caches it again. `send` sends one of the two with the script's sha or source first.
 */
export async function evalScript(s: Script, send: (command: 'evalsha' | 'eval', shaOrSource: string) => Promise<unknown>): Promise<unknown> {
  try {
    return await send('evalsha', s.sha);
  } catch (error) {
    if (!isNoScript(error)) throw error;
    return send('eval', s.source);
  }
}

/**
 * Sends one command with Buffer replies. ioredis defines a Buffer method per command at run time
 * (`evalshaBuffer`, `scanBuffer`, …) but types only `callBuffer`, and under
 * `enableAutoPipelining` `callBuffer` loses the command name (Redis answers "unknown command
 * '<sha>'"). So the per-command method is used where it exists, `callBuffer` elsewhere.
 */
export function sendBuffer(
  client: Required<Pick<RedisClient, 'callBuffer'>>,
  command: 'evalsha' | 'eval' | 'scan' | 'set' | 'ping' | 'info' | 'script' | 'cluster',
  args: RedisArgument[],
): Promise<unknown> {
  const method = (client as unknown as Record<string, unknown>)[`${command}Buffer`];
  if (typeof method === 'function') return (method as (...a: RedisArgument[]) => Promise<unknown>).apply(client, args);
  return client.callBuffer(command, ...args);
}

/**
 * Corks the client's current socket once per event-loop turn and uncorks it in `setImmediate`, so
 * the commands of one turn leave in one write. Does nothing for a client without `stream` (a
 * Cluster's commands go through its node clients).
 */
export function writeCoalescer(client: Pick<RedisClient, 'stream'>): () => void {
  type Corkable = NonNullable<RedisClient['stream']>;
  let corked: Corkable | undefined;
  const uncork = () => {
    const stream = corked;
    corked = undefined;
    stream?.uncork();
  };
  return () => {
    // Read each time: ioredis replaces the socket when it reconnects.
    const stream = client.stream as Partial<Corkable> | undefined;
    if (stream === undefined || stream === corked || typeof stream.cork !== 'function' || typeof stream.uncork !== 'function') return;
    if (corked !== undefined) corked.uncork();
    corked = stream as Corkable;
    corked.cork();
    setImmediate(uncork);
  };
}
