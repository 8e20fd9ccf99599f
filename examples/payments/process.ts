/**
 * Runs the service as a child process, so a fault scenario can have it SIGKILLed at a named
 * point (CRASH_AT) and start it again on the same port and database.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';

const script = join(import.meta.dirname, 'server.ts');

export interface ServiceProcess {
  readonly pid: number;
  readonly crashAt: string;
  /** The signal or exit code, once the process is gone. */
  readonly exited: Promise<string>;
  /** Lines the service printed (crash notices, errors). */
  readonly output: string[];
  kill(): Promise<void>;
}

export async function startService(env: Record<string, string>, crashAt = ''): Promise<ServiceProcess> {
  const child: ChildProcess = spawn(process.execPath, ['--conditions=idemkit-source', '--import', 'tsx', script], {
    env: { ...process.env, ...env, CRASH_AT: crashAt },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  const exited = new Promise<string>((resolve) => child.once('exit', (code, signal) => resolve(signal ?? `exit ${code}`)));
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n')) if (line) output.push(line);
      if (output.some((line) => line.includes('payments listening on'))) resolve();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((how) => reject(new Error(`the service exited (${how}) before listening:\n${output.join('\n')}`)));
  });
  return {
    pid: child.pid!,
    crashAt,
    exited,
    output,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid!, 'SIGKILL');
      await exited;
    },
  };
}
