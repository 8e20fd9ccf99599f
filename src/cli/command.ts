// What the store commands and `idemkit ui` share around their own work: their flags read with the
// store's, lines for a terminal with the store URL's secrets taken out, the URL from --store or
// $IDEMKIT_STORE_URL, and how a failure ends the command.
import { parseArgs } from 'node:util';
import type { ParseArgsConfig } from 'node:util';
import { CliUsageError } from '../check/errors.js';
import type { StoreUrl } from './store-url.js';
import { STORE_FLAGS, URL_FORMS, scrub } from './store-url.js';
import { terminalText } from './terminal.js';

export interface Io {
  out(text: string): void;
  err(text: string): void;
}

type Options = NonNullable<ParseArgsConfig['options']>;
type StoreFlagsConfig<O extends Options> = { args: string[]; allowPositionals: boolean; strict: true; options: typeof STORE_FLAGS & O };

/** Reads the flags that name a store and the command's `own`; one it does not know is a usage error. */
export function parseStoreFlags<O extends Options>(argv: readonly string[], own: O, allowPositionals: boolean): ReturnType<typeof parseArgs<StoreFlagsConfig<O>>> {
  try {
    const config: StoreFlagsConfig<O> = { args: [...argv], allowPositionals, strict: true, options: { ...STORE_FLAGS, ...own } };
    return parseArgs(config);
  } catch (error) {
    throw new CliUsageError((error as Error).message);
  }
}

/**
 * `terminal`, with every line escaped for a terminal and the secrets of the URL `url()` returns
 * (once it is parsed) taken out: fields were made printable where they were formatted, this
 * catches what an error message echoes.
 */
export function scrubbedIo(terminal: Io, url: () => StoreUrl | undefined): Io {
  return {
    out: (text) => terminal.out(terminalText(scrub(text, url()))),
    err: (text) => terminal.err(terminalText(scrub(text, url()))),
  };
}

/** The store URL the command was given, not yet parsed: `--store`, else $IDEMKIT_STORE_URL. */
export function storeUrlOption(store: string | undefined, env: NodeJS.ProcessEnv): string {
  const url = store ?? env.IDEMKIT_STORE_URL;
  if (url === undefined || url === '') throw new CliUsageError(`--store URL is required (or set IDEMKIT_STORE_URL): ${URL_FORMS}`);
  return url;
}

/**
 * Writes a failure as `idemkit <command>: <description>`, with a pointer to the command's help for a
 * usage error (not for a driver to install: help would not say more), and returns the exit code 2.
 */
export function failed(io: Io, command: string, description: string, error: unknown): 2 {
  io.err(`idemkit ${command}: ${description}`);
  if (error instanceof CliUsageError && !/is not installed|could not be loaded/.test(error.message)) io.err(`Run \`idemkit ${command} --help\` for usage.`);
  return 2;
}
