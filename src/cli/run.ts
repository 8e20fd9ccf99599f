// The `idemkit` command line, callable in-process (src/cli/main.ts is the executable).
import { main as checkMain } from '../check/cli.js';
import type { StoreCommand } from './admin.js';
import { STORE_COMMANDS, runStoreCommand } from './admin.js';
import { quoted } from './terminal.js';
import { runUi } from './ui.js';

export const USAGE = `Usage: idemkit <command>

Commands:
  check <url>     run the Idempotency-Key conformance cases against a live endpoint
  migrate         create or upgrade the records' table in a store
  inspect KEY     show one record (--scope S)
  list            list records (--state, --scope, --older-than, --limit)
  purge KEY       delete one record (--scope S --yes; --force for one in flight)
  reap            delete expired records, with a count
  stats           count records by state; the oldest in flight; bytes
  ui              serve a local, read-only page over the records (--host, --port, --token)

The store commands take --store URL (sqlite:FILE, postgres://…, mysql://…, redis://…) or
$IDEMKIT_STORE_URL. Run \`idemkit <command> --help\` for its options; docs/cli.md has them all.`;

export interface CliIo {
  out: (text: string) => void;
  err: (text: string) => void;
  tty: boolean;
}

/** Runs the CLI and resolves to its exit code. */
export async function main(argv: readonly string[], io: CliIo): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    io.out(USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command === 'check') return checkMain(argv, io);
  if (command === 'ui') return runUi(rest, io);
  if ((STORE_COMMANDS as readonly string[]).includes(command)) return runStoreCommand(command as StoreCommand, rest, io);
  io.err(`idemkit: unknown command ${quoted(command)}\n\n${USAGE}`);
  return 2;
}
