#!/usr/bin/env node
// The `idemkit` command: `idemkit check <url>`, and the store commands (docs/cli.md).
import { main } from './run.js';

const code = await main(process.argv.slice(2), {
  out: (text) => process.stdout.write(`${text}\n`),
  err: (text) => process.stderr.write(`${text}\n`),
  tty: process.stdout.isTTY === true,
});
// Exit explicitly once the output is flushed: a socket left behind by a target that never
// answered must not keep the process alive.
process.stdout.write('', () => process.exit(code));
