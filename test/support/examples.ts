/**
 * Starts a quickstart example the way `npm run example:<name>` does, on a free port, and resolves
 * with its URL once it says it is listening. Like npm, it first runs the example's pre-script
 * (`preexample:<name>`, e.g. Prisma's client generation) when package.json has one.
 */
import { spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..', '..');
const command = (name: string) => `node --conditions=idemkit-source --import tsx examples/${name}.ts`;

export async function startExample(name: string, env: Record<string, string>): Promise<{ url: string; child: ChildProcess }> {
  const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  // What is started below is what the README's command runs: a script that drifted fails here.
  if (scripts[`example:${name}`] !== command(name)) throw new Error(`package.json: "example:${name}" is ${JSON.stringify(scripts[`example:${name}`])}, not "${command(name)}"`);
  if (scripts[`preexample:${name}`] !== undefined) {
    const pre = spawnSync('npm', ['run', '-s', `preexample:${name}`], { cwd: root, encoding: 'utf8', timeout: 120_000 });
    if (pre.status !== 0) throw new Error(`npm run preexample:${name} failed (status ${pre.status}, ${pre.error?.message ?? 'no spawn error'}):\n${pre.stdout}\n${pre.stderr}`);
  }
  const child = spawn(process.execPath, ['--conditions=idemkit-source', '--import', 'tsx', `examples/${name}.ts`], {
    cwd: root,
    env: { ...process.env, PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /listening on (http:\/\/\S+)/.exec(out);
      if (match) resolve(match[1]!);
    });
    child.once('exit', (code) => reject(new Error(`example ${name} exited with ${code}: ${out}`)));
  });
  return { url, child };
}
