/**
 * Starts test/faults/server.ts inside a namespace (`ip netns exec NAME node …`), with an IPC
 * channel for parking and releasing its handler.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { NetnsLink } from './netns.js';

export interface Service {
  readonly url: string;
  readonly pid: number;
  /** Resolves once the handler for `key` (sent with `x-park: 1`) has written its effect and waits. */
  parked(key: string): Promise<void>;
  release(key: string): void;
  /** Resolves once the last store write for `key` (sent with `x-hold-last-write: 1`) waits to go out. */
  writing(key: string): Promise<void>;
  write(key: string): void;
  kill(): Promise<void>;
}

const script = join(import.meta.dirname, 'server.ts');

export async function startService(link: NetnsLink, env: Record<string, string>): Promise<Service> {
  const child: ChildProcess = spawn('ip', ['netns', 'exec', link.namespace, process.execPath, '--import', 'tsx', script], {
    env: { ...process.env, ...env, HOST: link.serviceHost },
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // What the service reported, per kind (`parked`, `writing`) and key, and who waits for it.
  const seen = new Set<string>();
  const waiting = new Map<string, () => void>();
  child.on('message', (message: { parked?: string; writing?: string }) => {
    for (const kind of ['parked', 'writing'] as const) {
      const key = message[kind];
      if (key === undefined) continue;
      seen.add(`${kind} ${key}`);
      waiting.get(`${kind} ${key}`)?.();
    }
  });
  const reported = (what: string) => (seen.has(what) ? Promise.resolve() : new Promise<void>((resolve) => waiting.set(what, resolve)));
  const port = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /listening (\d+)/.exec(out);
      if (match) resolve(match[1]!);
    });
    void exited.then(() => reject(new Error(`service exited before listening: ${out}`)));
  });
  return {
    url: `http://${link.serviceHost}:${port}`,
    pid: child.pid!,
    parked: (key) => reported(`parked ${key}`),
    release: (key) => void child.send({ release: key }),
    writing: (key) => reported(`writing ${key}`),
    write: (key) => void child.send({ write: key }),
    async kill() {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid!, 'SIGKILL');
      await exited;
    },
  };
}
