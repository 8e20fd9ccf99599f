// Who may read the page: without a token, only a loopback Host; with one, a Bearer header, or a
// session started by opening the page once with ?token= (an HttpOnly cookie for this port; the
// token itself is never stored in the page or the cookie).
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CliUsageError } from '../../check/errors.js';
import { page } from './html.js';
import { SECURITY_HEADERS, send } from './http.js';

const MIN_TOKEN_LENGTH = 16;
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

export interface TokenCheck {
  /** True when `candidate` is the token (constant time in its content). */
  matches(candidate: string): boolean;
  /** Starts a session: its id, for the cookie. */
  login(): string;
  /** True when `id` is a session this process started and whose Max-Age has not run out. */
  valid(id: string): boolean;
}

export function tokenCheck(token: string): TokenCheck {
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
export function admit(auth: TokenCheck | undefined, req: IncomingMessage, res: ServerResponse, url: URL, label: string): boolean {
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
