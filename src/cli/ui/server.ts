// The page's server: node:http, GET and HEAD only, each request admitted (auth.ts) and then routed
// to a page, the JSON API or an asset.
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { StoreAdmin } from '../../core/store.js';
import { describeFailure, inspectJson, statsJson, summaryJson } from '../format.js';
import { SCRIPT, STYLE } from './assets.js';
import type { TokenCheck } from './auth.js';
import { admit, checkBinding, tokenCheck } from './auth.js';
import { esc, page } from './html.js';
import { SECURITY_HEADERS, send, sendJson } from './http.js';
import { listPage, recordPage } from './pages.js';
import { readFilter, readRef } from './query.js';

export interface UiOptions {
  /** The address to bind. @default '127.0.0.1' */
  readonly host?: string | undefined;
  /** @default 0 (any free port) */
  readonly port?: number | undefined;
  /** Required unless `host` is a loopback address; when set, every request must carry it. */
  readonly token?: string | undefined;
  /** Shown in the page's header: the store URL (without its password) and where the records are. */
  readonly label?: string | undefined;
}

export interface UiServer {
  /** `http://host:port/`, without the token. */
  readonly url: string;
  readonly server: Server;
  close(): Promise<void>;
}

/** Starts the page over `admin`; resolves once it listens. */
export async function startUi(admin: StoreAdmin, options: UiOptions = {}): Promise<UiServer> {
  const host = options.host ?? '127.0.0.1';
  checkBinding(host, options.token);
  const auth = options.token === undefined ? undefined : tokenCheck(options.token);
  const label = options.label ?? 'store';
  const server = createServer((req, res) => {
    handle(admin, label, auth, req, res).catch((error: unknown) => {
      if (!res.headersSent) send(res, 500, 'text/html; charset=utf-8', page('Error', label, `<p class="error">${esc(describe(error))}</p>`));
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' || address.address.includes(':') ? `[${address.address}]` : address.address;
  return {
    url: `http://${shownHost}:${address.port}/`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** One line for any failure (on the terminal and on the error page). */
export function describe(error: unknown): string {
  return describeFailure(error, { schemaMissing: (e) => `${e.message}; run \`idemkit migrate\` first`, firstLine: true });
}

async function handle(admin: StoreAdmin, label: string, auth: TokenCheck | undefined, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://ui.invalid');
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    send(res, 405, 'text/plain; charset=utf-8', 'idemkit ui is read-only: GET only\n', { allow: 'GET, HEAD' });
    return;
  }
  if (!admit(auth, req, res, url, label)) return;
  const q = url.searchParams;
  switch (url.pathname) {
    case '/':
      return listPage(admin, label, q, res);
    case '/record':
      return recordPage(admin, label, q, res);
    case '/api/stats':
      return sendJson(res, 200, statsJson(await admin.stats()));
    case '/api/records': {
      const filter = readFilter(q);
      if (typeof filter === 'string') return sendJson(res, 400, { error: filter });
      return sendJson(res, 200, { records: (await admin.list(filter)).map(summaryJson) });
    }
    case '/api/record': {
      const ref = readRef(q);
      if (typeof ref === 'string') return sendJson(res, 400, { error: ref });
      const record = await admin.inspect(ref);
      return record === undefined ? sendJson(res, 404, { error: 'no such record' }) : sendJson(res, 200, inspectJson(record));
    }
    case '/ui.js':
      return send(res, 200, 'text/javascript; charset=utf-8', SCRIPT);
    case '/ui.css':
      return send(res, 200, 'text/css; charset=utf-8', STYLE);
    case '/favicon.ico':
      res.writeHead(204, SECURITY_HEADERS).end();
      return;
    default:
      send(res, 404, 'text/html; charset=utf-8', page('Not found', label, `<p class="error">Nothing at ${esc(url.pathname)}.</p><p><a href="/">All records</a></p>`));
  }
}
