/**
 * `store.verify()` of the Redis store: without writing a record, every master answers, runs Redis 5
 * or later and loads every script; a read-only script runs on a key under the prefix; on a
 * Cluster, the server hashes a record key as the client routes it. Each refusal names its fix.
 */
import { StoreIncompatibleError, StoreUnavailableError } from '../../core/errors.js';
import type { RedisArgument } from '../../drivers/redis.js';
import type { StoreCommand, StoreNode } from './client.js';
import type { RedisContext } from './context.js';
import { keySlot, redisRecordKey } from './keys.js';
import type { LuaScript } from './lua.js';
import { CHECKPOINT, CLAIM, COMPLETE, READ, REAP, RELEASE, RENEW } from './lua.js';
import { messageOf, text } from './reply.js';

/** Every script the store runs: what `verify()` loads on each master. */
const SCRIPTS: readonly LuaScript[] = [CLAIM, RENEW, CHECKPOINT, COMPLETE, RELEASE, READ, REAP];

/** One command of `verify()` on `node`: its reply, or the typed error that says what to fix. */
async function ask(c: RedisContext, node: StoreNode, command: StoreCommand, args: RedisArgument[], what: string): Promise<unknown> {
  try {
    return await node.send(command, args);
  } catch (error) {
    throw refusal(messageOf(error), node.address, what, c.prefix, error);
  }
}

async function verifyNode(c: RedisContext, node: StoreNode): Promise<void> {
  const where = node.address;
  try {
    await node.send('ping', []);
  } catch (error) {
    throw new StoreUnavailableError(
      `redis store: Redis at ${where} does not answer PING (${messageOf(error)}); check that Redis runs there, that the client was given that address and its credentials, and that it is connected (${c.client.library === 'ioredis' ? 'with enableOfflineQueue: false, ' : ''}await client.connect() before verify())`,
      { cause: error },
    );
  }
  let info: string | undefined;
  try {
    info = text(await node.send('info', ['server']));
  } catch (error) {
    // An ACL may refuse INFO (@dangerous): the version is then not known, and the scripts still load below.
    if (!/^NOPERM\b/.test(messageOf(error))) throw refusal(messageOf(error), where, 'INFO', c.prefix, error);
  }
  const version = /^redis_version:(\d+)\.(\d+)/m.exec(info ?? '');
  if (version !== null && Number(version[1]) < 5) {
    throw new StoreIncompatibleError(
      'server-version',
      `redis store: Redis at ${where} is version ${version[1]}.${version[2]}; the store needs Redis 5 or later (its scripts read TIME before they write, which older servers refuse); upgrade the server`,
    );
  }
  for (const s of SCRIPTS) {
    const sha = text(await ask(c, node, 'script', ['LOAD', s.source], `SCRIPT LOAD (the ${s.name} script)`));
    if (sha !== s.sha) throw new StoreUnavailableError(`redis store: Redis at ${where} answered SCRIPT LOAD of the ${s.name} script with ${JSON.stringify(sha)}, not its SHA-1 ${s.sha}`);
  }
}

/** `check`, within `verifyTimeoutMs` whatever the client does with its commands meanwhile. */
export async function verify(c: RedisContext): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const setting = c.client.offlineQueue();
      const queued = setting === undefined ? '' : `; the client queues commands while it is disconnected (${setting}), so they were waiting for a connection`;
      reject(
        new StoreUnavailableError(
          `redis store: verify() got no answer from Redis at ${c.client.address} within ${c.verifyTimeoutMs} ms (option \`verifyTimeoutMs\`)${queued}; check that Redis runs there, that the client was given that address and its credentials, and that it is connected (await client.connect() before verify())`,
        ),
      );
    }, c.verifyTimeoutMs);
  });
  try {
    // A check that settles after the deadline is ignored: race has handled its outcome.
    return await Promise.race([check(c), late]);
  } finally {
    clearTimeout(timer);
  }
}

async function check(c: RedisContext): Promise<void> {
  const rewriting = c.client.keyPrefix;
  if (rewriting !== undefined) {
    throw new StoreIncompatibleError(
      'key-prefix',
      `redis store: the ioredis client adds keyPrefix ${JSON.stringify(rewriting)} to every key, so the store's keys are not the ones reap scans for (and a brace in it would move every record onto one Cluster slot); remove keyPrefix from the client's options and give the store \`prefix\` instead`,
    );
  }
  const cluster = c.client.cluster;
  let nodes: StoreNode[];
  try {
    nodes = await c.client.masters();
  } catch (error) {
    throw new StoreUnavailableError(`redis store: the Cluster's masters cannot be reached (${messageOf(error)}); check that the client is connected (await client.connect() before verify())`, { cause: error });
  }
  if (nodes.length === 0) {
    const wait = c.client.library === 'ioredis' ? 'await its `ready` event' : 'await cluster.connect()';
    throw new StoreUnavailableError(`redis store: the Cluster client knows no master node; ${wait} (or check its startup nodes) before verify()`);
  }
  await Promise.all(nodes.map((node) => verifyNode(c, node)));
  // A read-only script on a key under the prefix: EVALSHA, and the ACL's key patterns, as every operation uses them.
  const probe = redisRecordKey(c.prefix, { scope: 'idemkit:verify', key: 'probe' });
  // Through the client's own routing (by the key on a Cluster), as every operation is sent.
  const routed: StoreNode = { address: c.client.address, send: (command, args) => c.client.send(command, probe, args) };
  const found = await ask(c, routed, 'evalsha', [READ.sha, 1, probe, c.graceMs], 'EVALSHA (the read script)');
  if (found !== null) throw new StoreUnavailableError(`redis store: the verify probe key ${probe} holds a record; it is never written, so another program writes under the prefix ${JSON.stringify(c.prefix)}`);
  if (!cluster) return;
  // Each script takes one key, the record's: the client routes it by its hash tag, and the server must agree.
  const answer = await ask(c, routed, 'cluster', ['KEYSLOT', probe], 'CLUSTER KEYSLOT');
  const slot = typeof answer === 'number' ? answer : Number(text(answer));
  if (slot !== keySlot(probe)) {
    throw new StoreIncompatibleError(
      'key-slot',
      `redis store: the Cluster puts the record key ${probe} on slot ${slot}, not on slot ${keySlot(probe)} of its hash tag, where the client sends its scripts; the server or a proxy in front of it does not hash keys as Redis Cluster does (route the client to the Cluster's own nodes)`,
    );
  }
}

/**
 * What a refused command of `verify()` means: an ACL that forbids the command or the store's keys,
 * a command renamed away, or (anything else) a server that failed to answer.
 */
function refusal(message: string, where: string, what: string, prefix: string, cause: unknown): StoreIncompatibleError | StoreUnavailableError {
  if (/^NOPERM\b/.test(message) && /\bkeys?\b/i.test(message)) {
    return new StoreIncompatibleError(
      'keys-refused',
      `redis store: Redis at ${where} refuses the store's keys to this connection's ACL user (${what}: ${message}); allow them: ACL SETUSER <user> ~${prefix}:*`,
      { cause },
    );
  }
  if (/^NOPERM\b/.test(message)) {
    return new StoreIncompatibleError(
      'scripting-refused',
      `redis store: Redis at ${where} refuses ${what} to this connection's ACL user (${message}); the store runs Lua scripts: ACL SETUSER <user> +@scripting (at least +script|load +evalsha +eval)`,
      { cause },
    );
  }
  if (/unknown (sub)?command/i.test(message)) {
    return new StoreIncompatibleError(
      'scripting-refused',
      `redis store: Redis at ${where} does not know ${what} (${message}); the store runs Lua scripts: remove the rename-command of EVAL, EVALSHA and SCRIPT from the server's configuration`,
      { cause },
    );
  }
  return new StoreUnavailableError(`redis store: ${what} failed at ${where}: ${message}`, { cause });
}
