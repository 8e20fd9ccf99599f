#!/usr/bin/env node
// Runs before `npm test` (after ensure-deps.mjs): builds dist/ when it is missing or older than
// the sources, so the README's test command passes on its own on a fresh clone. The suites that
// check the package as users get it (the docs' TypeScript blocks against the packed tarball, the
// built CLI) need dist/, and under CI=true they fail rather than skip without it.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import process from 'node:process';

const root = join(import.meta.dirname, '..');
// `npm run build` empties dist/ first and writes this file among the last ones it emits.
const declarations = join(root, 'dist', 'core', 'index.d.ts');

/** The newest modification time of a file, or of any file under a directory. */
function newest(path) {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  let time = 0;
  for (const entry of readdirSync(path)) time = Math.max(time, newest(join(path, entry)));
  return time;
}

const inputs = ['src', 'tsconfig.build.json', 'package.json'].map((name) => join(root, name));
const why = !existsSync(declarations) ? 'dist/ is missing' : Math.max(...inputs.map(newest)) > statSync(declarations).mtimeMs ? 'dist/ is older than src/' : undefined;

if (why !== undefined) {
  process.stdout.write(`idemkit: ${why}; building it first (npm run build)\n`);
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const run = spawnSync(npm, ['run', '-s', 'build'], { cwd: root, stdio: 'inherit', shell: process.platform === 'win32' });
  if (run.status !== 0) process.exit(run.status ?? 1);
}
