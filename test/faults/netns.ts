/**
 * A real network between a service and its store: a network namespace with two links, one for the
 * store traffic and one for the clients, so a fault on the store link leaves the client's path
 * alone. The store link is a pair of TUN devices joined by test/faults/tun-shaper.py, which can
 * delay and drop packets (netem's delay and loss, which this project's CI kernel lacks); the
 * client link is a veth pair. Every name carries a random per-run suffix; `destroy` (also wired to
 * the process's `exit`) removes exactly what `createLink` made, never anything else on the host.
 *
 *   host 10.213.X.1 ──store TUN pair + shaper── 10.213.X.2   (namespace)
 *   host 10.213.X.5 ──client veth────────────── 10.213.X.6   (namespace; the service listens here)
 */
import { execFileSync, spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { randomBytes, randomInt } from 'node:crypto';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export interface LinkShape {
  /** Added to every packet on its way to the store, so once per store round trip. */
  readonly delayMs?: number;
  /** The probability of dropping each packet, either way (0 to 1; 1 is a silent partition). */
  readonly loss?: number;
  /** The probability of dropping each packet from the store (its answers), in place of `loss` that way. */
  readonly lossFromStore?: number;
}

export interface NetnsLink {
  /** The namespace's name (`idk-<hex>`). */
  readonly namespace: string;
  /** The host's address on the store link: where the store forwarders listen. */
  readonly storeHost: string;
  /** The service's address on the client link: where the test sends its requests. */
  readonly serviceHost: string;
  /** Takes the store link down on the namespace side: a real partition, which the service's kernel sees. */
  down(): void;
  up(): void;
  /** Delays and drops packets on the store link from now on; resolves once the shaper applies it. */
  shape(shape: LinkShape): Promise<void>;
  /** No delay, no loss. */
  clear(): Promise<void>;
  destroy(): void;
}

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString();
const shaperScript = join(import.meta.dirname, 'tun-shaper.py');

/** Null when this process may create namespaces and TUN devices (root, `ip`, python3); else why it may not. */
export function netnsUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'the fault suite needs root (it creates a network namespace, a veth pair and TUN devices)';
  try {
    ip('-V');
  } catch {
    return '`ip` (iproute2) is not on PATH: apt-get install iproute2';
  }
  try {
    execFileSync('python3', ['--version'], { stdio: 'ignore' });
  } catch {
    return 'python3 is not on PATH (it runs test/faults/tun-shaper.py): apt-get install python3';
  }
  try {
    accessSync('/dev/net/tun', constants.R_OK | constants.W_OK);
  } catch {
    return '/dev/net/tun is missing or not writable (the store link is a TUN pair)';
  }
  return null;
}
/** A subnet 10.213.X.0/29 no interface on this host uses yet. */
function freeSubnet(): number {
  const used = ip('-o', '-4', 'addr', 'show');
  for (;;) {
    const x = randomInt(0, 256);
    if (!used.includes(`10.213.${x}.`)) return x;
  }
}

export async function createLink(): Promise<NetnsLink> {
  const id = randomBytes(3).toString('hex');
  const namespace = `idk-${id}`;
  // Interface names: at most 15 characters.
  const storeOut = `ik${id}s0`;
  const storeIn = `ik${id}s1`;
  const clientOut = `ik${id}c0`;
  const clientIn = `ik${id}c1`;
  const x = freeSubnet();
  const inNs = (...args: string[]) => ip('netns', 'exec', namespace, ...args);
  // The shaper owns both TUN devices: when it exits, the kernel deletes them.
  const shaper = spawn('python3', [shaperScript, storeIn, storeOut], { stdio: ['pipe', 'pipe', 'inherit'] });
  const shaperExited = new Promise<number | null>((resolve) => shaper.once('exit', (code) => resolve(code)));
  const lines = createInterface({ input: shaper.stdout! })[Symbol.asyncIterator]();
  /** The shaper's next line, or why there is none. */
  const answer = async (expected: string) => {
    const next = await Promise.race([lines.next(), shaperExited.then((code) => ({ done: true as const, value: `exit ${code}` }))]);
    if (next.done || next.value !== expected) throw new Error(`tun-shaper.py answered ${JSON.stringify(next.value)} where ${expected} was due`);
  };
  let destroyed = false;
  const destroy = () => {
    if (destroyed) return;
    destroyed = true;
    process.off('exit', destroy);
    if (shaper.exitCode === null && shaper.signalCode === null) process.kill(shaper.pid!, 'SIGKILL');
    // Deleting one end of a veth deletes its peer; the namespace takes its own ends with it.
    try {
      ip('link', 'del', clientOut);
    } catch {
      // not created, or already gone with the namespace
    }
    try {
      ip('netns', 'del', namespace);
    } catch {
      // not created
    }
  };
  process.on('exit', destroy);
  try {
    await answer('ready');
    ip('netns', 'add', namespace);
    inNs('ip', 'link', 'set', 'lo', 'up');
    ip('link', 'set', storeIn, 'netns', namespace);
    ip('addr', 'add', `10.213.${x}.1`, 'peer', `10.213.${x}.2`, 'dev', storeOut);
    ip('link', 'set', storeOut, 'up');
    inNs('ip', 'addr', 'add', `10.213.${x}.2`, 'peer', `10.213.${x}.1`, 'dev', storeIn);
    inNs('ip', 'link', 'set', storeIn, 'up');
    ip('link', 'add', clientOut, 'type', 'veth', 'peer', 'name', clientIn);
    ip('link', 'set', clientIn, 'netns', namespace);
    ip('addr', 'add', `10.213.${x}.5/30`, 'dev', clientOut);
    ip('link', 'set', clientOut, 'up');
    inNs('ip', 'addr', 'add', `10.213.${x}.6/30`, 'dev', clientIn);
    inNs('ip', 'link', 'set', clientIn, 'up');
  } catch (error) {
    destroy();
    throw error;
  }
  // One change at a time, each answered `ok` in order.
  let changes = Promise.resolve();
  const shape = ({ delayMs = 0, loss = 0, lossFromStore = loss }: LinkShape) => {
    for (const [name, p] of [['loss', loss], ['lossFromStore', lossFromStore]] as const) {
      if (!(p >= 0 && p <= 1)) throw new RangeError(`${name} must be between 0 and 1, got ${p}`);
    }
    if (!(delayMs >= 0)) throw new RangeError(`delayMs must be 0 or more, got ${delayMs}`);
    changes = changes.then(() => {
      shaper.stdin!.write(`${loss} ${lossFromStore} ${delayMs}\n`);
      return answer('ok');
    });
    return changes;
  };
  return {
    namespace,
    storeHost: `10.213.${x}.1`,
    serviceHost: `10.213.${x}.6`,
    down: () => void inNs('ip', 'link', 'set', storeIn, 'down'),
    up: () => void inNs('ip', 'link', 'set', storeIn, 'up'),
    shape,
    clear: () => shape({}),
    destroy,
  };
}
