/**
 * A real network between a service and its store: a network namespace with two veth pairs, one for
 * the store traffic and one for the clients, so a fault on the store link leaves the client's path
 * alone. Every name carries a random per-run suffix; `destroy` (also wired to the process's `exit`)
 * deletes exactly what `createLink` made, never anything else on the host.
 *
 *   host 10.213.X.1 ──store veth── 10.213.X.2   (namespace)
 *   host 10.213.X.5 ──client veth── 10.213.X.6  (namespace; the service listens here)
 */
import { execFileSync } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';

export interface NetnsLink {
  /** The namespace's name (`idk-<hex>`). */
  readonly namespace: string;
  /** The host's address on the store link: where the store forwarders listen. */
  readonly storeHost: string;
  /** The service's address on the client link: where the test sends its requests. */
  readonly serviceHost: string;
  /** Whether this kernel has the netem qdisc (delay, loss); without it `netem` throws. */
  readonly netem: boolean;
  /** Takes the store link down on the namespace side: a real partition. */
  down(): void;
  up(): void;
  /** Replaces the store link's egress qdisc (namespace side) with netem `spec`, e.g. `delay 50ms`. */
  shape(spec: string): void;
  /** Back to the default qdisc. */
  clear(): void;
  destroy(): void;
}

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString();

/** Null when this process may create namespaces (root, `ip` on PATH); else why it may not. */
export function netnsUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'the fault suite needs root (it creates a network namespace and veth pairs)';
  try {
    ip('-V');
  } catch {
    return '`ip` (iproute2) is not on PATH: apt-get install iproute2';
  }
  try {
    execFileSync('tc', ['-V'], { stdio: 'ignore' });
  } catch {
    return '`tc` (iproute2) is not on PATH: apt-get install iproute2';
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

export function createLink(): NetnsLink {
  const id = randomBytes(3).toString('hex');
  const namespace = `idk-${id}`;
  // Interface names: at most 15 characters.
  const storeOut = `ik${id}s0`;
  const storeIn = `ik${id}s1`;
  const clientOut = `ik${id}c0`;
  const clientIn = `ik${id}c1`;
  const x = freeSubnet();
  const inNs = (...args: string[]) => ip('netns', 'exec', namespace, ...args);
  const tcInNs = (...args: string[]) => execFileSync('ip', ['netns', 'exec', namespace, 'tc', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let destroyed = false;
  const destroy = () => {
    if (destroyed) return;
    destroyed = true;
    process.off('exit', destroy);
    // Deleting one end of a veth deletes its peer; the namespace takes its own ends with it.
    for (const name of [storeOut, clientOut]) {
      try {
        ip('link', 'del', name);
      } catch {
        // not created, or already gone with the namespace
      }
    }
    try {
      ip('netns', 'del', namespace);
    } catch {
      // not created
    }
  };
  process.on('exit', destroy);
  try {
    ip('netns', 'add', namespace);
    inNs('ip', 'link', 'set', 'lo', 'up');
    for (const [out, inside, hostAddr, nsAddr] of [
      [storeOut, storeIn, `10.213.${x}.1/30`, `10.213.${x}.2/30`],
      [clientOut, clientIn, `10.213.${x}.5/30`, `10.213.${x}.6/30`],
    ] as const) {
      ip('link', 'add', out, 'type', 'veth', 'peer', 'name', inside);
      ip('link', 'set', inside, 'netns', namespace);
      ip('addr', 'add', hostAddr, 'dev', out);
      ip('link', 'set', out, 'up');
      inNs('ip', 'addr', 'add', nsAddr, 'dev', inside);
      inNs('ip', 'link', 'set', inside, 'up');
    }
  } catch (error) {
    destroy();
    throw error;
  }
  let netem = true;
  try {
    tcInNs('qdisc', 'add', 'dev', storeIn, 'root', 'netem', 'delay', '0ms');
    tcInNs('qdisc', 'del', 'dev', storeIn, 'root');
  } catch {
    netem = false; // "Specified qdisc kind is unknown": a kernel built without sch_netem
  }
  return {
    namespace,
    storeHost: `10.213.${x}.1`,
    serviceHost: `10.213.${x}.6`,
    netem,
    down: () => void inNs('ip', 'link', 'set', storeIn, 'down'),
    up: () => void inNs('ip', 'link', 'set', storeIn, 'up'),
    shape(spec) {
      if (!netem) throw new Error('this kernel has no netem qdisc');
      tcInNs('qdisc', 'replace', 'dev', storeIn, 'root', 'netem', ...spec.split(' '));
    },
    clear() {
      try {
        tcInNs('qdisc', 'del', 'dev', storeIn, 'root');
      } catch {
        // already the default
      }
    },
    destroy,
  };
}
