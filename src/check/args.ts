// `idemkit check` flags. Where they overlap with curl they are curl's: -X, -H (repeatable), -d, -u.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { CheckConfig } from './config.js';
import { loadConfigFile, parseHeaderLines } from './config.js';
import { parseDuration, parseWholeNumber } from './flags.js';
import { CheckConfigError } from './errors.js';

export interface CheckCommand {
  readonly config: CheckConfig;
  readonly json: boolean;
  readonly verbose: boolean;
  readonly colour: boolean | undefined;
  readonly help: boolean;
}

export const CHECK_USAGE = `Usage: idemkit check <url> [options]

Runs the Idempotency-Key conformance cases (IETF draft-07 and the recommended profile) against a
live endpoint, e.g.  idemkit check http://127.0.0.1:3000/charges -H 'authorization: Bearer t1'

Request (curl's flags where they overlap):
  -X, --request METHOD       method of the endpoint (default POST)
  -H, --header 'Name: value' header for every request; repeatable
  -d, --data BODY            body template, or @file; {{uuid}} {{n}} {{key}} are replaced per request
                             (default {"amount":100,"currency":"usd"})
  -u, --user USER:PASSWORD   basic authentication
      --other-header 'N: v'  a second credential's header (scope isolation case); repeatable
      --key-header NAME      the key header (default Idempotency-Key)
      --key-optional         the endpoint accepts requests without a key (skips the 400 case)
      --error-body BODY      a body the handler answers with a 4xx/5xx (error replay case)
      --patch-url URL        where PATCH is served (default: the endpoint)
Target settings:
      --lease-ms N           the target's configured (short) lease: enables the lease case
      --max-body-bytes N     the target's body limit (default 1048576): the 413 case sends one more byte
      --max-response-bytes N the largest answer read (default 10485760); a larger one fails its request
Run:
  -n, --concurrency N        requests in the race (default 100)
      --rounds N             race rounds, each with a new key (default 1)
      --timeout DURATION     per request: 10, 10s or 500ms (default 10s)
      --deadline DURATION    the whole run (default 120s)
      --only ID,ID           run only these cases;  --skip ID,ID  skip these
      --strict               a failing PROFILE case FAILs instead of WARNing
  -c, --config FILE          JSON or YAML with the same settings (flags win)
      --json                 print the report as JSON
  -v, --verbose              show the evidence of passing cases too
      --no-color             no ANSI colour (colour is used only when stdout is a TTY)
  -h, --help

Exit codes: 0 no case FAILed · 1 a case FAILed · 2 bad usage, or the target could not be checked.`;

/** Parses `idemkit check` arguments (after the word `check`). */
export function parseCheckArgs(argv: readonly string[]): CheckCommand {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      strict: true,
      options: {
        request: { type: 'string', short: 'X' },
        header: { type: 'string', short: 'H', multiple: true },
        data: { type: 'string', short: 'd' },
        'data-raw': { type: 'string' },
        user: { type: 'string', short: 'u' },
        'other-header': { type: 'string', multiple: true },
        'key-header': { type: 'string' },
        'key-optional': { type: 'boolean' },
        'error-body': { type: 'string' },
        'patch-url': { type: 'string' },
        'lease-ms': { type: 'string' },
        'max-body-bytes': { type: 'string' },
        'max-response-bytes': { type: 'string' },
        concurrency: { type: 'string', short: 'n' },
        rounds: { type: 'string' },
        timeout: { type: 'string' },
        deadline: { type: 'string' },
        only: { type: 'string' },
        skip: { type: 'string' },
        strict: { type: 'boolean' },
        config: { type: 'string', short: 'c' },
        json: { type: 'boolean' },
        verbose: { type: 'boolean', short: 'v' },
        'no-color': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    throw new CheckConfigError((error as Error).message);
  }
  const { values: v, positionals } = parsed;
  if (v.help) return { config: { url: '' }, json: false, verbose: false, colour: undefined, help: true };
  if (positionals.length > 1) throw new CheckConfigError(`one endpoint URL expected, got ${positionals.length}: ${positionals.join(' ')}`);
  const file: Partial<CheckConfig> = v.config ? loadConfigFile(v.config) : {};
  const config: Record<string, unknown> = { ...file };
  const set = (name: keyof CheckConfig, value: unknown) => {
    if (value !== undefined) config[name] = value;
  };
  set('url', positionals[0]);
  set('method', v.request);
  if (v.header || v.user) {
    const headers: Record<string, string> = { ...file.headers, ...parseHeaderLines('--header', v.header ?? []) };
    if (v.user) headers.authorization = `Basic ${Buffer.from(v.user).toString('base64')}`;
    config.headers = headers;
  }
  const data = v.data ?? v['data-raw'];
  set('body', data?.startsWith('@') && v.data !== undefined ? readBody(data.slice(1)) : data);
  if (v['other-header']) config.otherHeaders = parseHeaderLines('--other-header', v['other-header']);
  set('keyHeader', v['key-header']);
  if (v['key-optional']) config.keyRequired = false;
  set('errorBody', v['error-body']);
  set('patchUrl', v['patch-url']);
  set('leaseMs', integer('--lease-ms', v['lease-ms']));
  set('maxBodyBytes', integer('--max-body-bytes', v['max-body-bytes']));
  set('maxResponseBytes', integer('--max-response-bytes', v['max-response-bytes']));
  set('concurrency', integer('--concurrency', v.concurrency));
  set('rounds', integer('--rounds', v.rounds));
  set('timeoutMs', duration('--timeout', v.timeout));
  set('deadlineMs', duration('--deadline', v.deadline));
  set('only', v.only?.split(',').map((s) => s.trim()).filter(Boolean));
  set('skip', v.skip?.split(',').map((s) => s.trim()).filter(Boolean));
  if (v.strict) config.strict = true;
  if (config.url === undefined) throw new CheckConfigError('the endpoint URL is required, e.g. idemkit check http://127.0.0.1:3000/charges');
  return { config: config as unknown as CheckConfig, json: v.json ?? false, verbose: v.verbose ?? false, colour: v['no-color'] ? false : undefined, help: false };
}

function readBody(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    throw new CheckConfigError(`--data @${path}: ${(error as Error).message}`);
  }
}

function integer(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = parseWholeNumber(value);
  if (n === undefined) throw new CheckConfigError(`${flag}: expected a whole number, got ${JSON.stringify(value)}`);
  return n;
}

/** `10` and `10s` are seconds (curl's --max-time), `500ms` milliseconds; `2m`, `1h` too. */
function duration(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const ms = parseDuration(value, 's');
  if (ms === undefined) throw new CheckConfigError(`${flag}: expected a duration like 10, 10s or 500ms, got ${JSON.stringify(value)}`);
  if (ms < 1) throw new CheckConfigError(`${flag}: must be at least 1 ms`);
  return Math.round(ms);
}
