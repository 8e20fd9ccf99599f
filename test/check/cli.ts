// Runs the CLI as users do (`npm run idemkit -- check …` is this command) and collects its output.
import { spawn } from 'node:child_process';
import { join } from 'node:path';

export const root = join(import.meta.dirname, '..', '..');

export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export function runCli(args: readonly string[]): Promise<CliRun> {
  const child = spawn(process.execPath, ['--conditions=idemkit-source', '--import', 'tsx', 'src/cli/main.ts', ...args], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}
