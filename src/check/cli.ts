// The `idemkit` command line, callable in-process (src/cli/main.ts is the executable).
import { parseCheckArgs, CHECK_USAGE } from './args.js';
import { CheckConfigError, TargetUnreachableError } from './errors.js';
import { formatReport } from './report.js';
import { runCheck } from './run.js';
import { printable, quoted, terminalJson } from './terminal.js';

const USAGE = `Usage: idemkit <command>

Commands:
  check <url>   run the Idempotency-Key conformance cases against a live endpoint

Run \`idemkit check --help\` for its options.`;

/** Runs the CLI and resolves to its exit code (0 ok, 1 a FAIL, 2 usage or unreachable target). */
export async function main(argv: readonly string[], io: { out: (text: string) => void; err: (text: string) => void; tty: boolean }): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    io.out(USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command !== 'check') {
    io.err(`idemkit: unknown command ${quoted(command)}\n\n${USAGE}`);
    return 2;
  }
  try {
    const parsed = parseCheckArgs(rest);
    if (parsed.help) {
      io.out(CHECK_USAGE);
      return 0;
    }
    const colour = parsed.colour ?? (io.tty && !process.env.NO_COLOR);
    const report = await runCheck(parsed.config);
    // The report holds what the target answered: escaped for the terminal, in JSON too (same value).
    io.out(parsed.json ? terminalJson(report, 2) : formatReport(report, { colour, verbose: parsed.verbose }));
    return report.ok ? 0 : 1;
  } catch (error) {
    if (error instanceof CheckConfigError) {
      io.err(`idemkit check: ${printable(error.message)}\nRun \`idemkit check --help\` for usage.`);
      return 2;
    }
    if (error instanceof TargetUnreachableError) {
      // may hold the baseline answer's body
      io.err(`idemkit check: ${printable(error.message)}`);
      return 2;
    }
    throw error;
  }
}

