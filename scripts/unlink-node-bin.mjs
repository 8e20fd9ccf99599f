#!/usr/bin/env node
// Runs after every local install (`prepare`: npm ci, npm install; not where idemkit is installed as a dependency). The Node 22 and 24 devDependencies (npm's `node`
// package under the aliases node22 and node24, for `npm run test:runtimes`) each declare a `node`
// bin, and npm links one of them as node_modules/.bin/node. npm puts node_modules/.bin first on
// PATH for every script, so `npm test`, vitest and tsx would run on that Node instead of the one
// the user runs npm with, and better-sqlite3, built for the installing Node, would not load.
// The link goes; the runtime legs call node_modules/node22/bin/node and node24's by path.
import { lstatSync, readlinkSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import process from 'node:process';

const link = join(import.meta.dirname, '..', 'node_modules', '.bin', 'node');
let target;
try {
  if (lstatSync(link).isSymbolicLink()) target = readlinkSync(link);
} catch {
  // No link: nothing to do.
}
if (target !== undefined && /(^|[\\/])node(22|24)[\\/]/.test(target)) {
  unlinkSync(link);
  process.stdout.write(`idemkit: removed node_modules/.bin/node (-> ${target}), so scripts run on the Node that runs npm\n`);
}
