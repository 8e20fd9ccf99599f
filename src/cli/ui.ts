// `idemkit ui`: a small, local, read-only page over a store's records (docs/cli.md#idemkit-ui).
// node:http and server-rendered HTML; the one script (live counts and table) and the style sheet are served
// from the page's own origin, so the Content-Security-Policy allows no inline code at all.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { isUtf8 } from 'node:buffer';
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { CliUsageError } from '../check/errors.js';
import { IdemkitError, InvalidRecordRefError } from '../core/errors.js';
import type { RecordDetails, RecordFilter, RecordState, RecordSummary, StoreAdmin } from '../core/store.js';
import { formatDuration, parseDuration, parseWholeNumber } from '../check/flags.js';
import type { OpenedStore } from './open/driver.js';
import { openStore } from './open/store.js';
import type { StoreUrl } from './store-url.js';
import { STORE_FLAGS, URL_FORMS, parseStoreUrl, scrub } from './store-url.js';
import { UNKNOWN_TIME, ago, describeFailure, inspectJson, statsJson, summaryJson } from './format.js';
import { terminalText } from './terminal.js';

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
      --table NAME           SQL stores: the records' table (default idempotency_records)
      --schema NAME          PostgreSQL: the table's schema (default public)
      --prefix PREFIX        Redis: the records' key prefix (default idemkit)
  -h, --help

Exit codes: 0 stopped · 2 bad usage (a non-loopback --host without --token), or the store could
not be used (bad URL, driver not installed, unreachable, table missing).`;

/** The most records one list page shows (`limit=` above it is lowered to it). */
export const MAX_LIST_LIMIT = 1000;
const DEFAULT_LIST_LIMIT = 100;
/** How much of a body the detail view shows: UTF-8 text up to this many bytes, binary as hex. */
const UI_TEXT_BYTES = 64 * 1024;
const UI_HEX_BYTES = 256;
const MIN_TOKEN_LENGTH = 16;
/** How often the page asks for fresh counts and, on the list, a fresh table. */
export const STATS_REFRESH_MS = 3_000;
/** How long a `?token=` login lasts: the session cookie's Max-Age, enforced by the server too. */
export const SESSION_MAX_AGE_S = 8 * 60 * 60;
/** Sessions kept at once; a login beyond it ends the oldest. */
const MAX_SESSIONS = 1_000;
/**
 * The session cookie's name. Cookies are not port-scoped: every service on the same host gets it,
 * so it is named by the port (two pages do not overwrite each other's) and holds a random session
 * id, which this process alone knows and which ends with it or its Max-Age, never the token.
 */
const cookieName = (port: number | undefined) => `idemkit_ui_${port ?? 0}`;

export interface UiIo {
  out(text: string): void;
  err(text: string): void;
}

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

/** True for 127.0.0.0/8, ::1 and localhost: addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  return h === 'localhost' || h === '::1' || h === '0:0:0:0:0:0:0:1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h) || /^::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** Refuses a binding the page must not have: a non-loopback address without a token, or a short token. */
export function checkBinding(host: string, token: string | undefined): void {
  if (token !== undefined && token.length < MIN_TOKEN_LENGTH) {
    throw new CliUsageError(`--token: expected at least ${MIN_TOKEN_LENGTH} characters (try \`openssl rand -hex 16\`), got ${token.length}`);
  }
  if (token === undefined && !isLoopback(host)) {
    throw new CliUsageError(
      `--host ${host} is not a loopback address: anyone who can reach it could read every stored response, so --token T (or $IDEMKIT_UI_TOKEN) is required`,
    );
  }
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

// ---- the command ------------------------------------------------------------------------------

/**
 * Runs `idemkit ui`: opens the store, serves the page until SIGINT/SIGTERM (or `stop` aborts), and
 * resolves to the exit code.
 */
export async function runUi(argv: readonly string[], terminal: UiIo, env: NodeJS.ProcessEnv = process.env, stop?: AbortSignal): Promise<number> {
  let opened: OpenedStore | undefined;
  let ui: UiServer | undefined;
  let storeUrl: StoreUrl | undefined;
  // Lines for a terminal: control characters escaped, the URL's secrets taken out of messages.
  const io: UiIo = {
    out: (text) => terminal.out(terminalText(scrub(text, storeUrl))),
    err: (text) => terminal.err(terminalText(scrub(text, storeUrl))),
  };
  try {
    let parsed;
    try {
      parsed = parseArgs({
        args: [...argv],
        allowPositionals: false,
        strict: true,
        options: {
          ...STORE_FLAGS,
          host: { type: 'string' },
          port: { type: 'string' },
          token: { type: 'string' },
          help: { type: 'boolean', short: 'h' },
        },
      });
    } catch (error) {
      throw new CliUsageError((error as Error).message);
    }
    const v = parsed.values;
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
    const url = v.store ?? env.IDEMKIT_STORE_URL;
    if (url === undefined || url === '') throw new CliUsageError(`--store URL is required (or set IDEMKIT_STORE_URL): ${URL_FORMS}`);
    storeUrl = parseStoreUrl(url);
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
    io.err(`idemkit ui: ${describe(error)}`);
    if (error instanceof CliUsageError && !/is not installed|could not be loaded/.test(error.message)) io.err('Run `idemkit ui --help` for usage.');
    return 2;
  } finally {
    await ui?.close();
    await opened?.close().catch(() => {});
  }
}

/** One line for any failure (on the terminal and on the error page). */
function describe(error: unknown): string {
  return describeFailure(error, { schemaMissing: (e) => `${e.message}; run \`idemkit migrate\` first`, firstLine: true });
}

// ---- HTTP -------------------------------------------------------------------------------------

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'cache-control': 'no-store',
};

function send(res: ServerResponse, status: number, type: string, body: string, headers: Record<string, string> = {}): void {
  const bytes = Buffer.from(body, 'utf8');
  res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, 'content-length': String(bytes.length), ...headers });
  res.end(res.req.method === 'HEAD' ? undefined : bytes);
}

interface TokenCheck {
  /** True when `candidate` is the token (constant time in its content). */
  matches(candidate: string): boolean;
  /** Starts a session: its id, for the cookie. */
  login(): string;
  /** True when `id` is a session this process started and whose Max-Age has not run out. */
  valid(id: string): boolean;
}

function tokenCheck(token: string): TokenCheck {
  // Compare fixed-length digests, so neither the content nor the length leaks through timing.
  const digest = (value: string) => createHash('sha256').update(value, 'utf8').digest();
  const expected = digest(token);
  // Session ids by their digest (what a lookup's timing could tell is about the digest), with
  // when each ends. In insertion order: the first is the oldest.
  const sessions = new Map<string, number>();
  return {
    matches: (candidate) => timingSafeEqual(digest(candidate), expected),
    login() {
      const now = Date.now();
      for (const [id, until] of sessions) if (until <= now) sessions.delete(id);
      if (sessions.size >= MAX_SESSIONS) sessions.delete(sessions.keys().next().value!);
      const id = randomBytes(32).toString('base64url');
      sessions.set(digest(id).toString('base64'), now + SESSION_MAX_AGE_S * 1000);
      return id;
    },
    valid(id) {
      const key = digest(id).toString('base64');
      const until = sessions.get(key);
      if (until === undefined) return false;
      if (until > Date.now()) return true;
      sessions.delete(key);
      return false;
    },
  };
}

function cookieValue(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return value.join('=');
  }
  return undefined;
}

/** Where a request may go, and the response when it may not (401, or 403 for a foreign Host). */
function admit(auth: TokenCheck | undefined, req: IncomingMessage, res: ServerResponse, url: URL, label: string): boolean {
  if (auth === undefined) {
    // No token: only a loopback Host, so a web page on another origin that points a DNS name at
    // 127.0.0.1 (DNS rebinding) cannot read the records through the visitor's browser.
    const hostname = hostOf(req.headers.host);
    if (hostname !== undefined && isLoopback(hostname)) return true;
    send(res, 403, 'text/plain; charset=utf-8', 'idemkit ui: this page answers only to a loopback Host (127.0.0.1, localhost, [::1])\n');
    return false;
  }
  const bearer = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1]?.trim();
  if (bearer !== undefined && auth.matches(bearer)) return true;
  const given = url.searchParams.get('token');
  if (given !== null && auth.matches(given)) {
    // Keep the token out of the address bar and history: a cookie from now on, then the same URL without it.
    url.searchParams.delete('token');
    // One leading slash: `//host/…` would send the browser to another site.
    const location = `/${url.pathname.replace(/^\/+/, '')}${url.search}`;
    res.writeHead(303, {
      ...SECURITY_HEADERS,
      location,
      'set-cookie': `${cookieName(req.socket.localPort)}=${auth.login()}; Max-Age=${SESSION_MAX_AGE_S}; HttpOnly; SameSite=Strict; Path=/`,
      'content-length': '0',
    });
    res.end();
    return false;
  }
  const session = cookieValue(req, cookieName(req.socket.localPort));
  if (session !== undefined && auth.valid(session)) return true;
  send(res, 401, 'text/html; charset=utf-8', page('Token required', label, '<p class="error">This page needs its token: open it once with <code>?token=…</code>, or send <code>Authorization: Bearer …</code>.</p>', false), {
    'www-authenticate': 'Bearer realm="idemkit ui"',
  });
  return false;
}

function hostOf(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  try {
    return new URL(`http://${header}`).hostname;
  } catch {
    return undefined;
  }
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

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  send(res, status, 'application/json; charset=utf-8', `${JSON.stringify(body)}\n`);
}

/** The list's filter from the query string, or a message saying what is wrong with it. */
function readFilter(q: URLSearchParams): (RecordFilter & { limit: number }) | string {
  const state = q.get('state') || undefined;
  if (state !== undefined && state !== 'in_flight' && state !== 'completed') return `state: expected in_flight or completed, got ${JSON.stringify(state)}`;
  const olderRaw = q.get('older') || undefined;
  let olderThanMs: number | undefined;
  if (olderRaw !== undefined) {
    const ms = parseDuration(olderRaw, 's');
    if (ms === undefined) return `older than: expected a duration like 30s, 5m, 2h or 1d, got ${JSON.stringify(olderRaw)}`;
    olderThanMs = Math.round(ms);
  }
  const limitRaw = q.get('limit') || undefined;
  let limit = DEFAULT_LIST_LIMIT;
  if (limitRaw !== undefined) {
    const n = parseWholeNumber(limitRaw);
    if (n === undefined || n < 1) return `limit: expected a whole number >= 1, got ${JSON.stringify(limitRaw)}`;
    limit = Math.min(n, MAX_LIST_LIMIT);
  }
  // An empty scope field is every scope (the form always sends the field).
  const scope = q.get('scope') || undefined;
  return { state: state as RecordState | undefined, scope, olderThanMs, limit };
}

function readRef(q: URLSearchParams): { scope: string; key: string } | string {
  const scope = q.get('scope');
  const key = q.get('key');
  if (scope === null || key === null) return 'scope and key are required: /record?scope=S&key=K';
  return { scope, key };
}

// ---- pages ------------------------------------------------------------------------------------

/** Escapes text for HTML element content and quoted attribute values. */
export function esc(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

function page(title: string, label: string, body: string, live = true): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${esc(title)} · idemkit ui</title>
<link rel="stylesheet" href="/ui.css">
${live ? '<script src="/ui.js" defer></script>' : ''}
</head>
<body>
<header><a class="brand" href="/">idemkit</a> <span class="store">${esc(label)}</span> <span class="ro">read-only</span></header>
${live ? countsBar() : ''}
<main>
${body}
</main>
</body>
</html>
`;
}

function countsBar(): string {
  const stat = (name: string, text: string) => `<span class="stat"><b data-stat="${name}">…</b> ${text}</span>`;
  return `<section class="counts" aria-label="live counts">${stat('inFlight', 'in flight')}${stat('abandoned', 'abandoned')}${stat('completed', 'completed')}${stat(
    'expired',
    'expired',
  )}${stat('bodyBytes', 'body bytes')}<span class="updated" data-stat="updated"></span></section>`;
}

/**
 * A record's age in a listing: since it was claimed (`createdAt`), with how long the owner has been
 * gone for an abandoned one. A record an earlier idemkit wrote has no creation time: its age then
 * counts from the end of its lease, as `olderThanMs` does.
 */
function age(r: RecordSummary, now: number): string {
  const since = formatDuration(Math.abs(now - r.leaseUntil));
  if (r.createdAt !== null) {
    const old = formatDuration(Math.max(0, now - r.createdAt));
    return r.state === 'in_flight' && r.leaseUntil <= now ? `${old} (owner gone ${since})` : old;
  }
  if (r.state === 'in_flight') return r.leaseUntil > now ? `running (lease ends in ${since})` : `owner gone ${since}`;
  return r.leaseUntil > now ? 'recent (in its lease)' : `over ${since}`;
}

/** A listing's lease: when the owner's lease ends, or how long ago it ended (the list's order). */
function lease(r: RecordSummary, now: number): string {
  const d = formatDuration(Math.abs(now - r.leaseUntil));
  return r.leaseUntil > now ? `ends in ${d}` : `ended ${d} ago`;
}

/** The tooltip of a listing's age: when the record was claimed and last changed. */
function ageTitle(r: RecordSummary): string {
  if (r.createdAt === null) return `created: unknown (written by an earlier idemkit); lease until ${iso(r.leaseUntil)}`;
  return `created ${iso(r.createdAt)}, updated ${r.updatedAt === null ? 'unknown' : iso(r.updatedAt)}`;
}

/** A time a record may not know (written by an earlier idemkit). */
function stamp(at: number | null, now: number): string {
  if (at === null) return `<span class="hint">${UNKNOWN_TIME}</span>`;
  return `${iso(at)} <span class="hint">(${esc(ago(at, now))})</span>`;
}

const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

function stateBadge(state: RecordState, expired: boolean): string {
  const text = state === 'in_flight' ? 'in flight' : 'completed';
  return `<span class="badge ${state}${expired ? ' expired' : ''}">${text}${expired ? ' · expired' : ''}</span>`;
}

function recordHref(scope: string, key: string): string {
  return `/record?${new URLSearchParams({ scope, key }).toString()}`;
}

async function listPage(admin: StoreAdmin, label: string, q: URLSearchParams, res: ServerResponse): Promise<void> {
  const filter = readFilter(q);
  const form = filterForm(q);
  if (typeof filter === 'string') {
    send(res, 400, 'text/html; charset=utf-8', page('Records', label, `${form}<p class="error">${esc(filter)}</p>`));
    return;
  }
  const records = await admin.list(filter);
  // Ages against this machine's clock: a listing carries no store time, and stats() may scan every record.
  const now = Date.now();
  // The script replaces this section with the same section of a fresh copy of this page.
  send(res, 200, 'text/html; charset=utf-8', page('Records', label, `${form}<section id="records" aria-live="polite">${recordsTable(records, now, filter.limit)}</section>`));
}

function filterForm(q: URLSearchParams): string {
  const state = q.get('state') ?? '';
  const option = (value: string, text: string) => `<option value="${value}"${state === value ? ' selected' : ''}>${text}</option>`;
  return `<form class="filters" method="get" action="/">
<label>State <select name="state">${option('', 'any')}${option('in_flight', 'in flight')}${option('completed', 'completed')}</select></label>
<label>Scope <input name="scope" value="${esc(q.get('scope') ?? '')}" placeholder="any"></label>
<label>Older than <input name="older" value="${esc(q.get('older') ?? '')}" placeholder="e.g. 5m" size="6"></label>
<label>Limit <input name="limit" value="${esc(q.get('limit') ?? String(DEFAULT_LIST_LIMIT))}" size="4"></label>
<button type="submit">Filter</button> <a href="/">clear</a>
</form>`;
}

function recordsTable(records: RecordSummary[], now: number, limit: number): string {
  if (records.length === 0) return '<p class="empty">No records match.</p>';
  const rows = records.map(
    (r) => `<tr>
<td>${stateBadge(r.state, r.expired)}</td>
<td class="scope">${esc(r.scope)}</td>
<td class="key"><a href="${esc(recordHref(r.scope, r.key))}">${esc(r.key)}</a></td>
<td class="lease" title="${iso(r.leaseUntil)}">${esc(lease(r, now))}</td>
<td title="${esc(ageTitle(r))}">${esc(age(r, now))}</td>
<td>${r.status === undefined ? '–' : String(r.status)}</td>
<td class="num">${r.bodyBytes === null ? '–' : String(r.bodyBytes)}</td>
<td class="num">${String(r.attempt)}</td>
<td title="${iso(r.expiresAt)}">${esc(ago(r.expiresAt, now))}</td>
<td>${r.recoveryPoint === undefined ? '–' : esc(r.recoveryPoint)}</td>
</tr>`,
  );
  const more = records.length === limit ? `<p class="more">The first ${limit}, oldest lease first; raise the limit for more.</p>` : '';
  return `<table class="records">
<thead><tr><th>State</th><th>Scope</th><th>Key</th><th aria-sort="ascending" title="when the owner's lease ends or ended: the list's order, earliest first">Lease</th><th title="since the record was claimed (a take-over keeps the first claim's time)">Age</th><th>Status</th><th>Body</th><th>Attempt</th><th>Window ends</th><th>Recovery point</th></tr></thead>
<tbody>
${rows.join('\n')}
</tbody>
</table>
<p class="note">${records.length} record${records.length === 1 ? '' : 's'}, oldest lease first (the Lease column), as of ${iso(now)}. Age counts from the claim; for a record an earlier idemkit wrote (no creation time), from the end of its lease.</p>${more}`;
}

async function recordPage(admin: StoreAdmin, label: string, q: URLSearchParams, res: ServerResponse): Promise<void> {
  const ref = readRef(q);
  if (typeof ref === 'string') {
    send(res, 400, 'text/html; charset=utf-8', page('Record', label, `<p class="error">${esc(ref)}</p>`));
    return;
  }
  let record: RecordDetails | undefined;
  try {
    record = await admin.inspect(ref);
  } catch (error) {
    if (!(error instanceof InvalidRecordRefError)) throw error;
    send(res, 400, 'text/html; charset=utf-8', page('Record', label, `<p class="error">${esc(error.message)}</p>`));
    return;
  }
  if (record === undefined) {
    send(
      res,
      404,
      'text/html; charset=utf-8',
      page('No such record', label, `<p class="error">No record for key <code>${esc(ref.key)}</code> in scope <code>${esc(ref.scope)}</code>.</p><p><a href="/">All records</a></p>`),
    );
    return;
  }
  send(res, 200, 'text/html; charset=utf-8', page(`Record ${ref.key}`, label, recordDetails(record)));
}

function recordDetails(r: RecordDetails): string {
  const row = (name: string, value: string) => `<tr><th>${name}</th><td>${value}</td></tr>`;
  const rows = [
    row('Scope', `<code class="scope">${esc(r.scope)}</code>`),
    row('Key', `<code class="key">${esc(r.key)}</code>`),
    row('State', `${stateBadge(r.state, r.expired)}${r.expired ? ' <span class="hint">past its window: claims treat it as absent; reap deletes it</span>' : ''}`),
    row('Fingerprint', `<code>${esc(r.fingerprint)}</code>`),
    row('Owner', `token <code>${esc(r.tokenPrefix || '(none)')}…</code>, attempt ${String(r.attempt)}`),
    row('Lease until', `${iso(r.leaseUntil)} <span class="hint">(${r.leaseUntil <= r.now ? 'ended' : 'ends'} ${esc(ago(r.leaseUntil, r.now))})</span>`),
    row('Window ends', `${iso(r.expiresAt)} <span class="hint">(${esc(ago(r.expiresAt, r.now))})</span>`),
    row(
      'Recovery point',
      r.recoveryPoint === undefined
        ? '<span class="hint">no checkpoint</span>'
        : `<code>${esc(r.recoveryPoint)}</code>${r.recoveryData === undefined ? '' : `<pre class="data">${esc(JSON.stringify(r.recoveryData, null, 2) ?? '')}</pre>`}`,
    ),
    row('Created', stamp(r.createdAt, r.now)),
    row('Updated', stamp(r.updatedAt, r.now)),
    row('Read at', `${iso(r.now)} <span class="hint">(the store's clock)</span>`),
  ];
  let response = '<h2>Stored response</h2><p class="hint">None yet: the record is in flight.</p>';
  const stored = r.response;
  if (stored) {
    const headers =
      stored.headers.length === 0
        ? '<p class="hint">No headers kept.</p>'
        : `<table class="headers">${stored.headers.map(([n, v]) => `<tr><th>${esc(n)}</th><td>${esc(v)}</td></tr>`).join('')}</table>`;
    response = `<h2>Stored response</h2>
<p>Status <b class="status">${String(stored.status)}</b></p>
<h3>Headers</h3>
${headers}
<h3>Body</h3>
${bodyView(stored.body)}`;
  }
  return `<p><a href="/">← All records</a></p>
<h1>Record</h1>
<table class="detail">${rows.join('\n')}</table>
${response}`;
}

function bodyView(body: Uint8Array | null): string {
  if (body === null) return '<p class="hint">Omitted: larger than the store\u2019s maxResponseBytes when completed (status and headers were kept).</p>';
  if (body.byteLength === 0) return '<p class="hint">Empty (0 bytes).</p>';
  const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (isUtf8(bytes)) {
    let end = Math.min(bytes.length, UI_TEXT_BYTES);
    while (end < bytes.length && end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
    const cut = end < bytes.length ? ` <span class="hint">(the first ${end} shown)</span>` : '';
    return `<p class="hint">${bytes.length} bytes, UTF-8 text${cut}</p><pre class="body">${esc(bytes.toString('utf8', 0, end))}</pre>`;
  }
  const end = Math.min(bytes.length, UI_HEX_BYTES);
  const hex = bytes.toString('hex', 0, end).replace(/(.{2})(?!$)/g, '$1 ');
  return `<p class="hint">${bytes.length} bytes, binary${end < bytes.length ? ` (the first ${end} in hex)` : ' (hex)'}</p><pre class="body hex">${hex}</pre>`;
}

// ---- assets -----------------------------------------------------------------------------------

/**
 * The page's one script, every STATS_REFRESH_MS: the live counts from /api/stats and, on the list,
 * the table: the same page fetched again (same filters), parsed inert by DOMParser (no script in
 * it runs), and its #records section put in place of this one. So the table is rendered, and
 * escaped, by the server's one function, as on a reload.
 */
const SCRIPT = `// idemkit ui: live counts and table
'use strict';
(function () {
  var names = ['inFlight', 'abandoned', 'completed', 'expired', 'bodyBytes'];
  function set(name, text) {
    var el = document.querySelector('[data-stat="' + name + '"]');
    if (el) el.textContent = text;
  }
  function fail(what) {
    return function (e) { set('updated', what + ' unavailable: ' + e.message); document.body.classList.add('stale'); };
  }
  function ok(res) { return res.ok ? res : Promise.reject({ message: 'HTTP ' + res.status }); }
  function refreshCounts() {
    return fetch('/api/stats', { credentials: 'same-origin', cache: 'no-store' })
      .then(ok)
      .then(function (res) { return res.json(); })
      .then(function (s) {
        names.forEach(function (n) { set(n, String(s[n])); });
        set('updated', 'as of ' + s.now.replace('T', ' ').replace(/\\.\\d+Z$/, 'Z'));
        document.body.classList.remove('stale');
      }, fail('counts'));
  }
  function refreshTable() {
    var current = document.getElementById('records');
    if (!current) return;
    fetch(location.pathname + location.search, { credentials: 'same-origin', cache: 'no-store' })
      .then(ok)
      .then(function (res) { return res.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, 'text/html').getElementById('records');
        var now = document.getElementById('records');
        if (fresh && now) now.replaceWith(document.adoptNode(fresh));
      })
      .catch(fail('table'));
  }
  function refresh() {
    refreshCounts().then(refreshTable);
  }
  refreshCounts();
  setInterval(refresh, ${STATS_REFRESH_MS});
})();
`;

const STYLE = `:root { color-scheme: light; --fg: #1d232a; --muted: #66707a; --line: #dde2e7; --bg: #f6f8fa; --accent: #2457c5; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: #fff; }
header { display: flex; gap: 12px; align-items: baseline; padding: 10px 20px; background: #1d232a; color: #fff; }
header .brand { color: #fff; font-weight: 700; text-decoration: none; font-size: 16px; }
header .store { color: #c5ced6; font-family: ui-monospace, monospace; font-size: 12px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; min-width: 0; }
header .ro { margin-left: auto; white-space: nowrap; font-size: 12px; color: #9fb1c2; border: 1px solid #4a5561; border-radius: 3px; padding: 0 6px; }
.counts { display: flex; gap: 22px; padding: 10px 20px; background: var(--bg); border-bottom: 1px solid var(--line); align-items: baseline; }
.counts .stat b { font-size: 18px; }
.counts .updated { margin-left: auto; color: var(--muted); font-size: 12px; }
body.stale .counts { background: #fff4e5; }
main { padding: 14px 20px 30px; }
a { color: var(--accent); }
.filters { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin-bottom: 12px; }
.filters input, .filters select { font: inherit; padding: 2px 4px; }
table.records { border-collapse: collapse; width: 100%; }
table.records th, table.records td { text-align: left; padding: 5px 7px; border-bottom: 1px solid var(--line); white-space: nowrap; }
table.records th { font-size: 12px; color: var(--muted); font-weight: 600; }
table.records td.key, table.records td.scope { font-family: ui-monospace, monospace; max-width: 260px; overflow: hidden; text-overflow: ellipsis; }
td.num { text-align: right; }
table.records th[aria-sort="ascending"]::after { content: " \\25B2"; font-size: 9px; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px; }
.badge.in_flight { background: #fff1c2; color: #6b4e00; }
.badge.completed { background: #d9f2dd; color: #145221; }
.badge.expired { background: #e8eaed; color: #55606b; }
table.detail th, table.headers th { text-align: left; padding: 3px 14px 3px 0; color: var(--muted); font-weight: 600; vertical-align: top; }
table.detail td, table.headers td { padding: 3px 0; }
pre { background: var(--bg); border: 1px solid var(--line); padding: 10px; overflow: auto; max-height: 480px; white-space: pre-wrap; word-break: break-all; }
code { font-family: ui-monospace, monospace; }
.hint, .note, .more, .empty { color: var(--muted); }
.error { color: #a11; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 24px; } h3 { font-size: 14px; }
`;
