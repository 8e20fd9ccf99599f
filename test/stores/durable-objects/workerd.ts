/**
 * workerd for the Durable Object tests: the test Worker (worker.ts) bundled by esbuild into one
 * module in a temp dir, a capnp config that binds `IdempotencyObject` as a SQLite-backed class on
 * a local disk, `workerd serve` on a spare port, ended by its pid. Nothing is downloaded: workerd is
 * the devDependency's binary, esbuild the one tsx brings.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { build } from 'esbuild';
import { freePort, retryOnPortTaken } from '../../support/ports.js';

const root = join(import.meta.dirname, '../../..');
export const WORKERD = join(root, 'node_modules/@cloudflare/workerd-linux-64/bin/workerd');

export interface Workerd {
  readonly url: string;
  readonly pid: number;
  /** What workerd wrote, for a failing test's message. */
  output(): string;
  stop(): Promise<void>;
}

const config = (port: number, disk: string) => `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .worker), (name = "disk", disk = (path = ${JSON.stringify(disk)}, writable = true)) ],
  sockets = [ (name = "http", address = "127.0.0.1:${port}", http = (), service = "main") ],
);
const worker :Workerd.Worker = (
  modules = [ (name = "worker.js", esModule = embed "worker.js") ],
  compatibilityDate = "2026-11-01",
  durableObjectNamespaces = [ (className = "IdempotencyObject", uniqueKey = "idemkit-test", enableSql = true) ],
  durableObjectStorage = (localDisk = "disk"),
  bindings = [ (name = "IDEMPOTENCY", durableObjectNamespace = "IdempotencyObject") ],
);
`;

/** Bundles worker.ts and serves it; answers once the Worker answers (at most `attempts` tries). */
export async function startWorkerd(attempts = 200): Promise<Workerd> {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-workerd-'));
  const disk = join(dir, 'disk');
  mkdirSync(disk);
  await build({
    entryPoints: [join(import.meta.dirname, 'worker.ts')],
    outfile: join(dir, 'worker.js'),
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    // workerd has node:crypto and Buffer built in (nodejs_compat is the default from 2026-08-04).
    external: ['node:*'],
    logLevel: 'silent',
  });
  // workerd exits with "bind(): Address already in use" when the spare port was taken before it
  // bound it: it is started again on another.
  try {
    return await retryOnPortTaken(async () => serve(dir, disk, await freePort(), attempts));
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}

async function serve(dir: string, disk: string, port: number, attempts: number): Promise<Workerd> {
  writeFileSync(join(dir, 'config.capnp'), config(port, disk));
  const child: ChildProcess = spawn(WORKERD, ['serve', 'config.capnp'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const kill = async () => {
    if (child.exitCode === null && child.signalCode === null) process.kill(child.pid!, 'SIGTERM');
    await exited;
  };
  const stop = async () => {
    await kill();
    rmSync(dir, { recursive: true, force: true });
  };
  for (let i = 0; i < attempts; i++) {
    if (child.exitCode !== null) break;
    try {
      if ((await fetch(`${url}/executions`)).ok) return { url, pid: child.pid!, output: () => output, stop };
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  await kill();
  throw new Error(`workerd did not serve the test Worker:\n${output}`);
}
