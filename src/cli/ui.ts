// `idemkit ui`: a small, local, read-only page over a store's records (docs/cli.md#idemkit-ui).
// This is the command: its flags, the store it opens, and how long it serves. The page itself is
// src/cli/ui/: server.ts (routes), auth.ts (loopback Host, token, session cookie), pages.ts and
// html.ts (server-rendered, escaped HTML), query.ts, assets.ts (the one script and style sheet).
import { CliUsageError } from '../check/errors.js';
import { IdemkitError } from '../core/errors.js';
import { parseWholeNumber } from '../check/flags.js';
import type { Io } from './command.js';
import { failed, parseStoreFlags, scrubbedIo, storeUrlOption } from './command.js';
import type { OpenedStore } from './open/driver.js';
import { openStore } from './open/store.js';
import type { StoreUrl } from './store-url.js';
import { URL_FORMS, parseStoreUrl } from './store-url.js';
import { checkBinding } from './ui/auth.js';
import type { UiServer } from './ui/server.js';
import { describe, startUi } from './ui/server.js';

export const UI_USAGE = `Usage: idemkit ui --store URL [--host 127.0.0.1] [--port 0|N] [--token T]

Serves a local, read-only page over the store's records: a list with filters (state, scope, older
than), a detail view with the stored response, and counts that refresh every few seconds. Nothing
on the page changes a record. Prints the URL it listens on; Ctrl-C stops it.

Options:
      --host HOST            the address to bind (default 127.0.0.1). Any address that is not a
                             loopback one needs --token
      --port N               the port (default 0: any free port)
      --token T              every request must carry it: open the page once with ?token=T (starts
                             a session: an HttpOnly cookie for this port, valid 8 hours) or send
                             Authorization: Bearer T. At least 16 characters
                             (default: $IDEMKIT_UI_TOKEN)
Store:
      --store URL            ${URL_FORMS}
                             (default: $IDEMKIT_STORE_URL)
      --table NAME           SQL stores, DynamoDB: the records' table (default idempotency_records)
      --schema NAME          PostgreSQL: the table's schema (default public)
      --prefix PREFIX        Redis: the records' key prefix (default idemkit)
  -h, --help

Exit codes: 0 stopped · 2 bad usage (a non-loopback --host without --token), or the store could
not be used (bad URL, driver not installed, unreachable, table missing).`;

/**
 * Runs `idemkit ui`: opens the store, serves the page until SIGINT/SIGTERM (or `stop` aborts), and
 * resolves to the exit code.
 */
export async function runUi(argv: readonly string[], terminal: Io, env: NodeJS.ProcessEnv = process.env, stop?: AbortSignal): Promise<number> {
  let opened: OpenedStore | undefined;
  let ui: UiServer | undefined;
  let storeUrl: StoreUrl | undefined;
  const io = scrubbedIo(terminal, () => storeUrl);
  try {
    const v = parseStoreFlags(
      argv,
      {
        host: { type: 'string' },
        port: { type: 'string' },
        token: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      false,
    ).values;
    if (v.help) {
      io.out(UI_USAGE);
      return 0;
    }
    const host = v.host ?? '127.0.0.1';
    const token = v.token ?? (env.IDEMKIT_UI_TOKEN || undefined);
    checkBinding(host, token);
    let port = 0;
    if (v.port !== undefined) {
      const n = parseWholeNumber(v.port);
      if (n === undefined || n > 65_535) throw new CliUsageError(`--port: expected a port number 0-65535, got ${JSON.stringify(v.port)}`);
      port = n;
    }
    storeUrl = parseStoreUrl(storeUrlOption(v.store, env));
    opened = await openStore(storeUrl, { table: v.table, schema: v.schema, prefix: v.prefix }, { create: false });
    await opened.verify();
    try {
      ui = await startUi(opened.store.admin, { host, port, token, label: `${opened.url.shown}, ${opened.where}` });
    } catch (error) {
      if (error instanceof IdemkitError) throw error;
      throw new CliUsageError(`cannot listen on ${host}:${port}: ${(error as Error).message}`);
    }
    io.out(`idemkit ui: listening on ${ui.url} (read-only; ${opened.url.kind} ${opened.url.shown}, ${opened.where})`);
    if (token !== undefined) io.out('idemkit ui: every request needs the token: open the page once with ?token=… or send Authorization: Bearer …');
    io.out('idemkit ui: Ctrl-C stops it');
    await new Promise<void>((resolve) => {
      const done = () => {
        process.off('SIGINT', done);
        process.off('SIGTERM', done);
        stop?.removeEventListener('abort', done);
        resolve();
      };
      process.once('SIGINT', done);
      process.once('SIGTERM', done);
      if (stop?.aborted) done();
      else stop?.addEventListener('abort', done);
    });
    return 0;
  } catch (error) {
    return failed(io, 'ui', describe(error), error);
  } finally {
    await ui?.close();
    await opened?.close().catch(() => {});
  }
}
