#!/usr/bin/env node
// Runs before `npm test` and `npm run demo` (the README's two commands): installs from the lockfile
// when node_modules is missing or older than package-lock.json, so each command works alone on a
// fresh clone and nobody installs twice. Only node's own modules: nothing is installed yet.
import { spawnSync } from 'node:child_process';
import process from 'node:process';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const installed = join(root, 'node_modules', '.package-lock.json');
const lockfile = join(root, 'package-lock.json');

if (!existsSync(installed) || statSync(installed).mtimeMs < statSync(lockfile).mtimeMs) {
  process.stdout.write('idemkit: installing dependencies from package-lock.json (npm ci) first\n');
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const run = spawnSync(npm, ['ci', '--no-audit', '--no-fund'], { cwd: root, stdio: 'inherit', shell: process.platform === 'win32' });
  if (run.status !== 0) process.exit(run.status ?? 1);
}
