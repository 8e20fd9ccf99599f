// The page's responses: every one carries the same security headers (no inline code, no framing,
// no referrer, nothing cached), and a HEAD gets the headers without the body.
import type { ServerResponse } from 'node:http';

export const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'cache-control': 'no-store',
};

export function send(res: ServerResponse, status: number, type: string, body: string, headers: Record<string, string> = {}): void {
  const bytes = Buffer.from(body, 'utf8');
  res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, 'content-length': String(bytes.length), ...headers });
  res.end(res.req.method === 'HEAD' ? undefined : bytes);
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  send(res, status, 'application/json; charset=utf-8', `${JSON.stringify(body)}\n`);
}
