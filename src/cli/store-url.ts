/**
 * A store URL, as the `idemkit` store commands and `ui` take it: parsed and checked, shown without
 * its password, and the secrets it holds taken out of any message (`scrub`). Opening the store
 * it names is src/cli/open/.
 */
import { CliUsageError } from '../check/errors.js';

export type StoreKind = 'sqlite' | 'postgres' | 'mysql' | 'redis' | 'dynamodb';

export interface StoreUrl {
  readonly kind: StoreKind;
  /** The URL as given, with any password replaced by `***`: what messages show. */
  readonly shown: string;
  /** sqlite: the file; others: the URL to connect to. */
  readonly target: string;
  /** DynamoDB: the region of `dynamodb:REGION` (absent: the SDK's own, from AWS_REGION or the profile). */
  readonly region?: string;
  /** DynamoDB: the endpoint of `dynamodb+http://host:port` (DynamoDB Local, dynalite, LocalStack). */
  readonly endpoint?: string;
  /** Redis Cluster: the seed nodes of `redis+cluster://host:port,host:port`. */
  readonly clusterNodes?: ReadonlyArray<{ host: string; port: number }>;
  /** The password and credential parameters, as written and decoded: `scrub` takes them out of messages. */
  readonly secrets: readonly string[];
}

export interface StoreNames {
  /** SQL stores and DynamoDB: the table (default idempotency_records). */
  readonly table?: string | undefined;
  /** PostgreSQL: the schema (default public). */
  readonly schema?: string | undefined;
  /** Redis: the key prefix (default idemkit). */
  readonly prefix?: string | undefined;
}

/** The flags that name a store, as every store command and `ui` take them (node:util parseArgs). */
export const STORE_FLAGS = {
  store: { type: 'string' },
  table: { type: 'string' },
  schema: { type: 'string' },
  prefix: { type: 'string' },
} as const;

export const URL_FORMS =
  'sqlite:FILE, postgres://…, mysql://… (or mariadb://…), redis://… (rediss://…, redis+cluster://host:port,host:port), dynamodb: (dynamodb:REGION, dynamodb+http://host:port)';

/** An AWS region name: what `dynamodb:REGION` takes. */
const REGION = /^[a-z]{2}(-[a-z]+)+-\d+$/;

/** Parses a store URL; throws `CliUsageError` naming the forms it takes, never its password. */
export function parseStoreUrl(url: string): StoreUrl {
  const unsupported = (why: string) => new CliUsageError(`${why}; expected ${URL_FORMS}`);
  if (url.startsWith('sqlite:')) {
    const file = url.slice('sqlite:'.length).replace(/^\/\/(?=\/)/, '');
    if (file === '' || file === ':memory:') throw unsupported(`the store URL "${url}" names no database file`);
    return { kind: 'sqlite', shown: url, target: file, secrets: [] };
  }
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  // DynamoDB: credentials never go in the URL (the SDK reads them from the environment, the
  // profile or the role), so nothing in it is secret.
  // Nothing else is taken, and what is refused is not echoed: it may be a key pasted in.
  if (scheme === 'dynamodb') {
    const region = url.slice('dynamodb:'.length);
    if (region.startsWith('//')) throw unsupported(`the store URL "dynamodb://…" is not a form: the table is a flag (--store dynamodb: --table NAME), the region dynamodb:REGION`);
    if (region !== '' && !REGION.test(region)) throw unsupported(`the store URL "dynamodb:…" is not dynamodb: or dynamodb:REGION (an AWS region such as eu-west-1; credentials do not go in the URL)`);
    return { kind: 'dynamodb', shown: url, target: url, ...(region === '' ? {} : { region }), secrets: [] };
  }
  if (scheme === 'dynamodb+http' || scheme === 'dynamodb+https') {
    const match = /^dynamodb\+(https?):\/\/([\w.-]+|\[[\da-f:]+\])(:\d{1,5})?\/?$/i.exec(url);
    if (!match) throw unsupported(`the store URL "${scheme}://…" is not ${scheme}://host:port (credentials, a path and options do not go in this form)`);
    return { kind: 'dynamodb', shown: url, target: url, endpoint: `${match[1]!.toLowerCase()}://${match[2]}${match[3] ?? ''}`, secrets: [] };
  }
  if (scheme === 'redis+cluster') {
    const nodes = url
      .slice('redis+cluster://'.length)
      .split(',')
      .map((hostPort) => {
        const match = /^([^:/,]+):(\d{1,5})\/?$/.exec(hostPort);
        // Only a node made of host characters is echoed: anything else may be a password.
        const shown = /^[\w.:[\]-]*$/.test(hostPort) ? ` "${hostPort}"` : '';
        if (!match) throw unsupported(`the store URL "redis+cluster://…" has a node${shown} that is not host:port (credentials and options do not go in this form)`);
        return { host: match[1]!, port: Number(match[2]) };
      });
    // Every node is host:port: nothing in it to hide.
    return { kind: 'redis', shown: url, target: url, clusterNodes: nodes, secrets: [] };
  }
  const kind: StoreKind | undefined =
    scheme === 'postgres' || scheme === 'postgresql'
      ? 'postgres'
      : scheme === 'mysql' || scheme === 'mariadb'
        ? 'mysql'
        : scheme === 'redis' || scheme === 'rediss'
          ? 'redis'
          : undefined;
  if (kind === undefined) throw unsupported(`unsupported store URL "${redact(url)}"`);
  const parsed = parseUrl(url);
  if (parsed === undefined) {
    throw unsupported(
      `the store URL "${redact(url)}" is not a valid URL (the rest is not shown: it may hold a password). Percent-encode @ : / ? # % in a user name or password (%40 %3A %2F %3F %23 %25)`,
    );
  }
  if (misplacedAt(url, parsed)) {
    throw unsupported(
      `the store URL "${redact(url)}" has an @ or # after its host (the rest is not shown: it may hold a password). Percent-encode @ : / ? # % in a user name or password (%40 %3A %2F %3F %23 %25)`,
    );
  }
  if (parsed.hostname === '') throw unsupported(`the store URL "${redact(url)}" names no host`);
  const secrets = secretsOf(parsed);
  if (kind === 'mysql') parsed.protocol = 'mysql:';
  return { kind, shown: redact(url), target: parsed.href, secrets };
}

function parseUrl(url: string): URL | undefined {
  try {
    return new URL(url);
  } catch {
    return undefined;
  }
}

/**
 * An `@` or `#` after the user info: `postgres://u:pa/ss@h/db` parses as host `u`, port none, path
 * `/ss@h/db`, and `u:1?x@h` as port 1 and a query; the drivers read them so too. Either way what
 * the user meant as a password would be shown as a path or a query: such a URL is refused.
 */
function misplacedAt(url: string, parsed: URL): boolean {
  // A `#` ends the URL for the drivers: what follows (a password's tail, often) is dropped.
  return parsed.pathname.includes('@') || parsed.search.includes('@') || url.includes('#');
}

/** Query parameters the drivers read credentials or key material from (pg, mysql2, ioredis take any option there). */
const SECRET_PARAM = /pass|pwd|secret|token|cred|auth|key|ssl|tls/i;
/** …of which these name a secret whatever their value; the others (ssl=true, sslmode=require) may show a plain setting. */
const ALWAYS_SECRET_PARAM = /pass|pwd|secret|token|cred/i;
const PLAIN_SETTING = /^(true|false|0|1|disable|allow|prefer|require|verify-ca|verify-full|no-verify|direct|postgres)$/i;

function secretParam(name: string, value: string): boolean {
  return SECRET_PARAM.test(name) && (ALWAYS_SECRET_PARAM.test(name) || !PLAIN_SETTING.test(value));
}

function decoded(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

function jsonStrings(text: string): string[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return [];
  }
  const out: string[] = [];
  const walk = (v: unknown): void => {
    if (typeof v === 'string') out.push(v);
    else if (v !== null && typeof v === 'object') Object.values(v).forEach(walk);
  };
  walk(value);
  return out;
}

/** The secret values in a URL, as written and decoded: what `scrub` takes out of messages. */
function secretsOf(parsed: URL): string[] {
  const found = new Set<string>();
  if (parsed.password !== '') found.add(parsed.password).add(decoded(parsed.password));
  for (const part of parsed.search.slice(1).split('&')) {
    const at = part.indexOf('=');
    if (at < 0) continue;
    const [name, value] = [decoded(part.slice(0, at).replace(/\+/g, ' ')), part.slice(at + 1)];
    const text = decoded(value.replace(/\+/g, ' '));
    if (value === '' || !secretParam(name, text)) continue;
    found.add(value).add(text);
    // mysql2 reads a JSON value (ssl={"key":"…","passphrase":"…"}): its strings too.
    for (const leaf of jsonStrings(text)) found.add(leaf);
  }
  // Longest first, so that a secret containing another is taken out whole.
  return [...found].filter((secret) => secret.length >= 3).sort((a, b) => b.length - a.length);
}

/**
 * The URL as messages show it: the user-info password and every credential query parameter
 * (`password=`, `sslpassword=`, `sslkey=`, mysql2's `ssl={…}`, …) as `***`, the fragment dropped.
 * A URL the parser rejects, or with an `@` after its host, shows only its scheme: where the
 * password ends cannot be known.
 */
export function redact(url: string): string {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1];
  if (scheme === undefined) return '(not a URL)';
  if (scheme.toLowerCase() === 'sqlite') return url;
  const parsed = parseUrl(url);
  if (parsed === undefined || misplacedAt(url, parsed)) return `${scheme}://…`;
  const userInfo = parsed.username === '' && parsed.password === '' ? '' : `${parsed.username}${parsed.password === '' ? '' : ':***'}@`;
  const host = parsed.port === '' ? parsed.hostname : `${parsed.hostname}:${parsed.port}`;
  const query = parsed.search
    .slice(1)
    .split('&')
    .map((part) => {
      const at = part.indexOf('=');
      if (at < 0) return part;
      const name = part.slice(0, at);
      return secretParam(decoded(name.replace(/\+/g, ' ')), decoded(part.slice(at + 1).replace(/\+/g, ' '))) ? `${name}=***` : part;
    })
    .join('&');
  return `${scheme}://${userInfo}${host}${parsed.pathname}${query === '' ? '' : `?${query}`}`;
}

/** `text` with the secrets of `url` replaced by `***`: for a driver's message that echoes one. */
export function scrub(text: string, url: StoreUrl | undefined): string {
  let out = text;
  for (const secret of url?.secrets ?? []) out = out.split(secret).join('***');
  return out;
}
