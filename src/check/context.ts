import http from 'node:http';
import https from 'node:https';
import type { ResolvedConfig } from './config.js';
import type { HttpAnswer, HttpRequest, HeldRequest } from './http.js';
import { header, open, send } from './http.js';
import { differentBody, freshKey, render, sameJson } from './template.js';

export interface RequestSpec {
  /** The key header's value(s); `null` sends none. @default a fresh key */
  readonly key?: string | readonly string[] | null;
  readonly body?: string | undefined;
  readonly method?: string;
  readonly url?: URL;
  /** Merged over the configured headers (a second credential). */
  readonly headers?: Readonly<Record<string, string>>;
}

/** What a case can do: build and send requests to the target, and describe the answers. */
export class CheckContext {
  readonly config: ResolvedConfig;
  private readonly agent: http.Agent;

  constructor(config: ResolvedConfig) {
    this.config = config;
    // Keep-alive keeps sequential cases cheap; in-flight requests each get their own socket.
    this.agent = new (config.url.protocol === 'https:' ? https.Agent : http.Agent)({ keepAlive: true, maxSockets: Infinity });
  }

  key(): string {
    return freshKey();
  }

  body(key = ''): string {
    return render(this.config.body, key);
  }

  otherBody(body: string, key = ''): string {
    return differentBody(this.config.body, body, key);
  }

  request(spec: RequestSpec): HttpRequest {
    const headers: Record<string, string | readonly string[]> = { ...this.config.headers, ...spec.headers };
    if (spec.key !== null) headers[this.config.keyHeader] = spec.key ?? freshKey();
    return { method: spec.method ?? this.config.method, url: spec.url ?? this.config.url, headers, body: spec.body };
  }

  send(spec: RequestSpec): Promise<HttpAnswer> {
    return send(this.request(spec), { timeoutMs: this.config.timeoutMs, agent: this.agent, maxResponseBytes: this.config.maxResponseBytes });
  }

  /** A request held one byte short of complete (its own socket, so it cannot block a later one). */
  open(spec: RequestSpec): HeldRequest {
    return open(this.request(spec), { timeoutMs: this.config.timeoutMs, maxResponseBytes: this.config.maxResponseBytes });
  }

  /** Sends a request in one write; `written` resolves when it is on the socket. */
  start(spec: RequestSpec): HeldRequest {
    return open(this.request(spec), { timeoutMs: this.config.timeoutMs, agent: this.agent, hold: false, maxResponseBytes: this.config.maxResponseBytes });
  }

  close(): void {
    this.agent.destroy();
  }
}

export const replayed = (answer: HttpAnswer): boolean => header(answer, 'idempotent-replayed')?.toLowerCase() === 'true';

export const is2xx = (answer: HttpAnswer): boolean => answer.status >= 200 && answer.status < 300;

/** Same status and the same body (byte for byte, or the same JSON). */
export function sameResponse(a: HttpAnswer, b: HttpAnswer): boolean {
  return a.status === b.status && (a.body === b.body || sameJson(a.body, b.body));
}

/** `201 (replayed) {"id":"…"}`, shortened for the table. */
export function describe(answer: HttpAnswer): string {
  const body = answer.body.replace(/\s+/g, ' ').trim();
  return `${answer.status}${replayed(answer) ? ' (replayed)' : ''}${body ? ` ${body.length > 100 ? `${body.slice(0, 97)}...` : body}` : ''}`;
}
