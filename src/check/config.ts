import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { closestName, isHttpToken } from '../core/option-reader.js';
import { CheckConfigError } from './errors.js';
import { DEFAULT_BODY, DEFAULT_MAX_RESPONSE_BYTES } from './race.js';

/** What to check and how hard; every field but `url` has a default. Also the shape of a config file. */
export interface CheckConfig {
  /** The endpoint under test, e.g. `http://127.0.0.1:3000/charges`. */
  readonly url: string;
  /** @default 'POST' */
  readonly method?: string;
  /** Sent with every request: authorization, content-type, … (`content-type: application/json` by default). */
  readonly headers?: Readonly<Record<string, string>>;
  /** Body template: `{{uuid}}`, `{{n}}`, `{{key}}` are replaced per request. @default '{"amount":100,"currency":"usd"}' */
  readonly body?: string;
  /** A second credential's headers (replacing those of the same name) for the scope-isolation case. */
  readonly otherHeaders?: Readonly<Record<string, string>>;
  /** A body template the handler answers with a 4xx/5xx it stores (the error-replay case). */
  readonly errorBody?: string;
  /** Where PATCH is served. @default url */
  readonly patchUrl?: string;
  /** @default 'Idempotency-Key' */
  readonly keyHeader?: string;
  /** Does the endpoint require a key (400 without one)? @default true */
  readonly keyRequired?: boolean;
  /** Requests in the race. @default 100 */
  readonly concurrency?: number;
  /** Race rounds, each with a new key. @default 1 */
  readonly rounds?: number;
  /** Per request. @default 10000 */
  readonly timeoutMs?: number;
  /** The whole run. @default 120000 */
  readonly deadlineMs?: number;
  /** The target's (short) lease: enables the lease case. */
  readonly leaseMs?: number;
  /** The target's body limit: the 413 case sends one byte more. @default 1048576 */
  readonly maxBodyBytes?: number;
  /**
   * The largest answer body the check reads (each answer is held in memory to compare it). A
   * request whose answer is larger fails with a message naming this limit. @default 10485760 (10 MiB)
   */
  readonly maxResponseBytes?: number;
  /** Fail (not warn) when a PROFILE case fails. @default false */
  readonly strict?: boolean;
  /** Run only these case ids. */
  readonly only?: readonly string[];
  /** Skip these case ids. */
  readonly skip?: readonly string[];
}

/** A config with every default applied and every value checked. */
export interface ResolvedConfig {
  readonly url: URL;
  readonly method: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  readonly otherHeaders: Readonly<Record<string, string>> | undefined;
  readonly errorBody: string | undefined;
  readonly patchUrl: URL;
  readonly keyHeader: string;
  readonly keyRequired: boolean;
  readonly concurrency: number;
  readonly rounds: number;
  readonly timeoutMs: number;
  readonly deadlineMs: number;
  readonly leaseMs: number | undefined;
  readonly maxBodyBytes: number;
  readonly maxResponseBytes: number;
  readonly strict: boolean;
  readonly only: readonly string[] | undefined;
  readonly skip: readonly string[];
}

const KNOWN = [
  'url', 'method', 'headers', 'body', 'otherHeaders', 'errorBody', 'patchUrl', 'keyHeader', 'keyRequired', 'concurrency',
  'rounds', 'timeoutMs', 'deadlineMs', 'leaseMs', 'maxBodyBytes', 'maxResponseBytes', 'strict', 'only', 'skip',
];

/** Checks a config and applies the defaults; throws CheckConfigError naming the field. */
export function resolveConfig(config: CheckConfig): ResolvedConfig {
  if (typeof config !== 'object' || config === null) throw new CheckConfigError('the config must be an object');
  for (const name of Object.keys(config)) {
    if (KNOWN.includes(name)) continue;
    const meant = closestName(name, KNOWN);
    throw new CheckConfigError(`unknown config field "${name}"${meant === undefined ? '' : `; did you mean "${meant}"?`} (known: ${KNOWN.join(', ')})`);
  }
  const url = httpUrl('url', config.url);
  const method = (config.method ?? 'POST').toUpperCase();
  if (!isHttpToken(method)) throw new CheckConfigError(`method: not an HTTP method: ${JSON.stringify(config.method)}`);
  const keyHeader = config.keyHeader ?? 'Idempotency-Key';
  if (!isHttpToken(keyHeader)) throw new CheckConfigError(`keyHeader: not a header name: ${JSON.stringify(keyHeader)}`);
  return {
    url,
    method,
    headers: headerMap('headers', { 'content-type': 'application/json', ...lower(headerMap('headers', config.headers ?? {})) }),
    body: text('body', config.body) ?? DEFAULT_BODY,
    otherHeaders: config.otherHeaders === undefined ? undefined : lower(headerMap('otherHeaders', config.otherHeaders)),
    errorBody: text('errorBody', config.errorBody),
    patchUrl: config.patchUrl === undefined ? url : httpUrl('patchUrl', config.patchUrl),
    keyHeader,
    keyRequired: bool('keyRequired', config.keyRequired, true),
    concurrency: int('concurrency', config.concurrency, 100, 2, 10_000),
    rounds: int('rounds', config.rounds, 1, 1, 1_000),
    timeoutMs: int('timeoutMs', config.timeoutMs, 10_000, 1, 600_000),
    deadlineMs: int('deadlineMs', config.deadlineMs, 120_000, 1, 86_400_000),
    leaseMs: config.leaseMs === undefined ? undefined : int('leaseMs', config.leaseMs, 0, 1, 600_000),
    maxBodyBytes: int('maxBodyBytes', config.maxBodyBytes, 1024 * 1024, 1, 512 * 1024 * 1024),
    maxResponseBytes: int('maxResponseBytes', config.maxResponseBytes, DEFAULT_MAX_RESPONSE_BYTES, 1, 1024 * 1024 * 1024),
    strict: bool('strict', config.strict, false),
    only: config.only === undefined ? undefined : list('only', config.only),
    skip: config.skip === undefined ? [] : list('skip', config.skip),
  };
}

/**
 * The `yaml` package's parser, loaded only for a YAML config file: it is an optional peer
 * dependency, so that an application importing idemkit does not install a YAML parser it never uses.
 */
function yamlParser(path: string): (source: string) => unknown {
  try {
    return (createRequire(import.meta.url)('yaml') as { parse: (source: string) => unknown }).parse;
  } catch {
    throw new CheckConfigError(`config file ${path}: reading YAML needs the \`yaml\` package (npm install --save-dev yaml), or write the config as JSON (a .json file)`);
  }
}

/** Reads a JSON or YAML config file (by extension; YAML is a superset, so anything else parses as YAML). */
export function loadConfigFile(path: string): Partial<CheckConfig> {
  let source: string;
  try {
    source = readFileSync(path, 'utf8');
  } catch (error) {
    throw new CheckConfigError(`config file ${path}: ${(error as Error).message}`);
  }
  let value: unknown;
  try {
    value = path.endsWith('.json') ? JSON.parse(source) : yamlParser(path)(source);
  } catch (error) {
    throw new CheckConfigError(`config file ${path}: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new CheckConfigError(`config file ${path}: expected a mapping of fields`);
  const config = { ...(value as Record<string, unknown>) };
  // Headers may also be written as curl lines: ["authorization: Bearer t1"].
  for (const field of ['headers', 'otherHeaders'] as const) {
    if (Array.isArray(config[field])) config[field] = parseHeaderLines(field, config[field] as unknown[]);
  }
  return config as Partial<CheckConfig>;
}

/** `Name: value` lines (curl's -H) into a map; a later line of the same name wins. */
export function parseHeaderLines(field: string, lines: readonly unknown[]): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const match = typeof line === 'string' ? /^([^:\s]+):\s*(.*)$/.exec(line) : null;
    if (!match) throw new CheckConfigError(`${field}: expected "Name: value", got ${JSON.stringify(line)}`);
    headers[match[1]!.toLowerCase()] = match[2]!.trim();
  }
  return headers;
}

function httpUrl(field: string, value: unknown): URL {
  if (typeof value !== 'string' || value === '') throw new CheckConfigError(`${field}: the endpoint URL is required, e.g. http://127.0.0.1:3000/charges`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new CheckConfigError(`${field}: not a URL: ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new CheckConfigError(`${field}: only http:// and https:// endpoints can be checked, got ${url.protocol}//`);
  }
  return url;
}

function headerMap(field: string, value: unknown): Record<string, string> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new CheckConfigError(`${field}: expected a map of header names to values`);
  for (const [name, v] of Object.entries(value)) {
    if (!isHttpToken(name)) throw new CheckConfigError(`${field}: not a header name: ${JSON.stringify(name)}`);
    if (typeof v !== 'string' || /[\r\n\0]/.test(v)) throw new CheckConfigError(`${field}: the value of ${name} must be a one-line string`);
  }
  return value as Record<string, string>;
}

const lower = (headers: Record<string, string>) => Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));

function text(field: string, value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw new CheckConfigError(`${field}: expected a string`);
  return value;
}

function bool(field: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new CheckConfigError(`${field}: expected true or false`);
  return value;
}

function int(field: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new CheckConfigError(`${field}: expected an integer from ${min} to ${max}, got ${JSON.stringify(value)}`);
  }
  return value;
}

function list(field: string, value: unknown): string[] {
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) throw new CheckConfigError(`${field}: expected a list of case ids`);
  return value as string[];
}
