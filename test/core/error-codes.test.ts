/**
 * The error table (src/core/error-codes.ts) is the one list of codes: every code has exactly one
 * class, `instanceof` that class holds exactly for its code(s), the HTTP ones answer with the
 * table's status, slug and title, no throw site in src invents a code, and docs/semantics.md lists
 * the same table.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import * as checkApi from '../../src/check/index.js';
import * as clientApi from '../../src/client/index.js';
import * as coreApi from '../../src/core/index.js';
import type { ErrorCode, ErrorCodeEntry, ErrorEntryPoint } from '../../src/core/error-codes.js';
import { ERROR_CODES, errorCodeEntry } from '../../src/core/error-codes.js';
import {
  BodyNotKeptError,
  BodyTooLargeError,
  CorruptRecordError,
  ExecutionEndedError,
  ExecutionTimeoutHttpError,
  IdemkitError,
  IdempotencyHttpError,
  InvalidKeyError,
  InvalidOptionError,
  StoreSchemaMissingError,
  StoreIncompatibleError,
  InvalidRecordRefError,
  InvalidScopeError,
  KeyInFlightError,
  KeyMismatchError,
  LeaseLostError,
  MissingKeyError,
  InstanceInUseError,
  MountedTwiceError,
  NotTransactionalError,
  PROBLEM_BASE,
  problemFor,
  RequestAbortedError,
  StoreBusyError,
  StoreFullError,
  StoreUnavailableError,
  TransactionalModeError,
  TransactionEndedError,
} from '../../src/core/errors.js';
import * as messagingApi from '../../src/messaging/index.js';
import * as patternsApi from '../../src/patterns/index.js';
import { CheckConfigError, CheckRequestError, CliUsageError, TargetUnreachableError } from '../../src/check/errors.js';
import { AttemptTimeoutError, BodyNotReplayableError, CrossOriginRedirectError, HttpStatusError, RequestFailedError, ResponseTooLargeError, RetryBudgetExhaustedError, TooManyRedirectsError } from '../../src/client/errors.js';
import { InvalidMessageIdError, MessageScopeClashError, MissingMessageIdError, WebhookRawBodyError, WebhookVerificationError } from '../../src/messaging/errors.js';
import { IllegalTransitionError, InvalidStateMachineError, RowVanishedError, UnknownStateError, VersionConflictError } from '../../src/patterns/errors.js';
import { PhaseError } from '../../src/patterns/phase-errors.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const info = { key: 'k', attempts: 2 };
const response = new Response('{}', { status: 500 });

/** One error of every code, built the way src builds it; a code missing here is a type error. */
const samples = {
  ERR_IDEMKIT_INVALID_OPTION: () => new InvalidOptionError('leaseMs', 'must be a number'),
  ERR_IDEMKIT_MOUNTED_TWICE: () => new MountedTwiceError('mounted twice'),
  ERR_IDEMKIT_INSTANCE_IN_USE: () => new InstanceInUseError('checkout-1', 10_000),
  ERR_IDEMKIT_KEY_MISSING: () => new MissingKeyError('Idempotency-Key'),
  ERR_IDEMKIT_KEY_INVALID: () => new InvalidKeyError('Idempotency-Key', 'it is empty'),
  ERR_IDEMKIT_SCOPE_INVALID: () => new InvalidScopeError('a lone surrogate'),
  ERR_IDEMKIT_BODY_TOO_LARGE: () => new BodyTooLargeError(1024),
  ERR_IDEMKIT_KEY_IN_FLIGHT: () => new KeyInFlightError(2500),
  ERR_IDEMKIT_KEY_MISMATCH: () => new KeyMismatchError(),
  ERR_IDEMKIT_LEASE_LOST: () => new LeaseLostError(),
  ERR_IDEMKIT_STORE_UNAVAILABLE: () => new StoreUnavailableError('postgres store: connection refused', { cause: new Error('ECONNREFUSED') }),
  ERR_IDEMKIT_STORE_FULL: () => new StoreFullError('memory store is full (maxRecords = 3): a new key is refused', 2500),
  ERR_IDEMKIT_STORE_BUSY: () => new StoreBusyError('sqlite store: the SQLite writer is busy: claim waited longer than `storeTimeoutMs` (3000 ms)', 4200, { cause: new Error('queued') }),
  ERR_IDEMKIT_EXECUTION_TIMEOUT: () => new ExecutionTimeoutHttpError(5000, 'nothing'),
  ERR_IDEMKIT_BODY_NOT_KEPT: () => new BodyNotKeptError('read before'),
  ERR_IDEMKIT_REQUEST_ABORTED: () => new RequestAbortedError('aborted'),
  ERR_IDEMKIT_TRANSACTIONAL_MODE: () => new TransactionalModeError('refused'),
  ERR_IDEMKIT_NOT_TRANSACTIONAL: () => new NotTransactionalError('no transactions'),
  ERR_IDEMKIT_EXECUTION_ENDED: () => new ExecutionEndedError('ended'),
  ERR_IDEMKIT_TRANSACTION_ENDED: () => new TransactionEndedError('ended'),
  ERR_IDEMKIT_INVALID_REF: () => new InvalidRecordRefError('scope', 'a lone surrogate'),
  ERR_IDEMKIT_CORRUPT_RECORD: () => new CorruptRecordError('corrupt'),
  ERR_IDEMKIT_STORE_SCHEMA_MISSING: () => new StoreSchemaMissingError('postgres', ['table public.t'], '`await store.migrate()`'),
  ERR_IDEMKIT_STORE_INCOMPATIBLE: () => new StoreIncompatibleError('scripting-refused', 'redis store: scripting refused'),
  ERR_IDEMKIT_REQUEST_FAILED: () => new RequestFailedError(info, new Error('ECONNRESET')),
  ERR_IDEMKIT_RETRY_BUDGET_EXHAUSTED: () => new RetryBudgetExhaustedError(info, { response }),
  ERR_IDEMKIT_HTTP_STATUS: () => new HttpStatusError({ ...info, replayed: false }, response, undefined),
  ERR_IDEMKIT_RESPONSE_TOO_LARGE: () => new ResponseTooLargeError(info, { limit: 1, received: 2, declared: undefined, status: 200, url: 'http://x/' }),
  ERR_IDEMKIT_CROSS_ORIGIN_REDIRECT: () => new CrossOriginRedirectError(info, { from: 'http://a', to: 'http://b', location: 'http://b/', status: 302 }),
  ERR_IDEMKIT_TOO_MANY_REDIRECTS: () => new TooManyRedirectsError(info, { limit: 3, location: 'http://a/' }),
  ERR_IDEMKIT_ATTEMPT_TIMEOUT: () => new AttemptTimeoutError(100),
  ERR_IDEMKIT_BODY_NOT_REPLAYABLE: () => new BodyNotReplayableError('a stream'),
  ERR_IDEMKIT_CHECK_CONFIG: () => new CheckConfigError('bad flag'),
  ERR_IDEMKIT_CHECK_UNREACHABLE: () => new TargetUnreachableError('nothing listens'),
  ERR_IDEMKIT_CHECK_REQUEST: () => new CheckRequestError('timeout', 'no answer'),
  ERR_IDEMKIT_CLI_USAGE: () => new CliUsageError('unsupported store URL'),
  ERR_IDEMKIT_MESSAGE_ID_MISSING: () => new MissingMessageIdError('no id'),
  ERR_IDEMKIT_MESSAGE_ID_INVALID: () => new InvalidMessageIdError('empty'),
  ERR_IDEMKIT_MESSAGE_SCOPE_CLASH: () => new MessageScopeClashError('clash'),
  ERR_IDEMKIT_WEBHOOK_UNVERIFIED: () => new WebhookVerificationError('bad-signature', 'bad signature'),
  ERR_IDEMKIT_WEBHOOK_RAW_BODY: () => new WebhookRawBodyError('parsed'),
  UNKNOWN_STATE: () => new UnknownStateError('to', 'x', ['a']),
  ILLEGAL_TRANSITION: () => new IllegalTransitionError('a', 'b', []),
  INVALID_STATE_MACHINE: () => new InvalidStateMachineError('bad'),
  VERSION_CONFLICT: () => new VersionConflictError(3),
  ROW_VANISHED: () => new RowVanishedError('orders'),
  EMPTY_PHASE_NAME: () => new PhaseError('EMPTY_PHASE_NAME', 'empty'),
  RESERVED_PHASE: () => new PhaseError('RESERVED_PHASE', 'reserved', 'started'),
  DUPLICATE_PHASE: () => new PhaseError('DUPLICATE_PHASE', 'twice', 'a'),
  INVALID_PHASE: () => new PhaseError('INVALID_PHASE', 'no function', 'a'),
  NO_PHASES: () => new PhaseError('NO_PHASES', 'none'),
  NO_CONTEXT: () => new PhaseError('NO_CONTEXT', 'no context'),
  UNKNOWN_PHASE: () => new PhaseError('UNKNOWN_PHASE', 'unknown', 'x'),
  DEFINITION_MISMATCH: () => new PhaseError('DEFINITION_MISMATCH', 'other', 'a'),
  CORRUPT_RECOVERY_DATA: () => new PhaseError('CORRUPT_RECOVERY_DATA', 'corrupt', 'a'),
  OUTPUT_NOT_JSON: () => new PhaseError('OUTPUT_NOT_JSON', 'bigint', 'a'),
  ERR_IDEMKIT_RESULT_NOT_KEPT: () => new patternsApi.ResultNotKeptError('charge(): the call ran once, but its result was larger than the store keeps'),
} satisfies Record<ErrorCode, () => IdemkitError>;

const entryPoints: Record<ErrorEntryPoint, Record<string, unknown>> = {
  idemkit: coreApi,
  'idemkit/client': clientApi,
  'idemkit/check': checkApi,
  'idemkit/messaging': messagingApi,
  'idemkit/patterns': patternsApi,
};

type ErrorClass = abstract new (...args: never[]) => IdemkitError;
const codes = Object.keys(ERROR_CODES) as ErrorCode[];
/** Every class the table names, as its entry point exports it. */
const tableClasses = new Map<string, ErrorClass>(codes.map((code) => [ERROR_CODES[code].class, entryPoints[ERROR_CODES[code].from][ERROR_CODES[code].class] as ErrorClass]));

describe('the error table', () => {
  it('has a sample for every code and no more', () => {
    expect(Object.keys(samples).sort()).toEqual([...codes].sort());
  });

  it.each(codes)('%s: its one class carries it, exported from its entry point', (code) => {
    const entry = ERROR_CODES[code];
    const Class = tableClasses.get(entry.class);
    expect(Class, `${entry.class} is exported from ${entry.from}`).toBeTypeOf('function');
    const error = samples[code]();
    expect(error.code).toBe(code);
    expect(error.constructor).toBe(Class);
    expect(error.name).toBe(entry.class);
    expect(error).toBeInstanceOf(IdemkitError);
    expect(errorCodeEntry(code)).toBe(entry);
    // A class with one code says which: `error.code === X.code` and `instanceof X` agree.
    const familyCodes = codes.filter((c) => ERROR_CODES[c].class === entry.class);
    if (familyCodes.length === 1) expect((Class as unknown as { code: unknown }).code).toBe(code);
  });

  it('instanceof a table class holds exactly for that class’s codes (no code has two classes)', () => {
    for (const code of codes) {
      const error = samples[code]();
      for (const [name, Class] of tableClasses) {
        expect(error instanceof Class, `${code} instanceof ${name}`).toBe(ERROR_CODES[code].class === name);
      }
    }
  });

  it('only PhaseError carries a family of codes; every other class carries one', () => {
    const byClass = new Map<string, ErrorCode[]>();
    for (const code of codes) byClass.set(ERROR_CODES[code].class, [...(byClass.get(ERROR_CODES[code].class) ?? []), code]);
    expect([...byClass].filter(([, list]) => list.length > 1).map(([name]) => name)).toEqual(['PhaseError']);
  });

  it.each(codes)('%s: an HTTP answer exactly when the table gives one, with its status, type and title', (code) => {
    const entry: ErrorCodeEntry = ERROR_CODES[code];
    const error = samples[code]();
    expect(error instanceof IdempotencyHttpError).toBe(entry.http !== undefined);
    if (!(error instanceof IdempotencyHttpError) || !entry.http) {
      expect(problemFor(error)).toBeUndefined();
      return;
    }
    expect({ status: error.status, slug: error.slug, title: error.title, type: error.type }).toEqual({
      status: entry.http.status,
      slug: entry.http.slug,
      title: entry.http.title,
      type: PROBLEM_BASE + entry.http.slug,
    });
    const problem = problemFor(error);
    expect(problem).toEqual(error.problem());
    expect(problem).toMatchObject({ type: PROBLEM_BASE + entry.http.slug, title: entry.http.title, status: entry.http.status, detail: entry.http.detail ?? error.message });
  });

  it('lease-lost and store-unavailable answer the same bytes as before, whatever the store’s message said', () => {
    const leaseLost = new LeaseLostError();
    const storeDown = samples.ERR_IDEMKIT_STORE_UNAVAILABLE();
    expect(JSON.stringify(problemFor(leaseLost))).toBe(
      '{"type":"urn:idemkit:problem:lease-lost","title":"The request lost ownership of its Idempotency-Key","status":409,"detail":"The request ran past its lease and another request took over; nothing from this attempt was committed."}',
    );
    expect(leaseLost.headers).toEqual({ 'retry-after': '1' });
    expect(leaseLost.message).toBe('The idempotency record is no longer owned by this request (lease lost or record replaced)');
    expect(JSON.stringify(problemFor(storeDown))).toBe(
      '{"type":"urn:idemkit:problem:store-unavailable","title":"Idempotency store unavailable","status":503,"detail":"The idempotency store could not be reached or did not answer in time; the request was not executed. Retry with the same key."}',
    );
    expect(storeDown.headers).toEqual({ 'retry-after': '1' });
    expect(storeDown.message).toBe('postgres store: connection refused');
  });

  it('store-full says when to retry; store-schema-missing says not to (no Retry-After): neither tells the client the store’s message', () => {
    const full = samples.ERR_IDEMKIT_STORE_FULL();
    expect(full).toMatchObject({ status: 503, slug: 'store-full', retryAfterMs: 2500, headers: { 'retry-after': '3' } });
    expect(full.message).toMatch(/maxRecords = 3/);
    expect(problemFor(full)?.detail).not.toMatch(/maxRecords/);
    const missing = samples.ERR_IDEMKIT_STORE_SCHEMA_MISSING();
    expect(missing).toMatchObject({ status: 500, slug: 'store-schema-missing', headers: {}, missing: ['table public.t'] });
    expect(missing.message).toBe('postgres store: missing table public.t; run `await store.migrate()`');
    expect(problemFor(missing)?.type).toBe('urn:idemkit:problem:store-schema-missing');
    expect(problemFor(missing)?.detail).not.toMatch(/public\.t|migrate\(\)/);
  });

  it('store-busy says when to retry (rounded up to whole seconds), and tells the client nothing of the store', () => {
    const busy = samples.ERR_IDEMKIT_STORE_BUSY();
    expect(busy).toMatchObject({ status: 503, slug: 'store-busy', retryAfterMs: 4200, headers: { 'retry-after': '5' } });
    expect(busy.message).toMatch(/SQLite writer is busy/);
    expect(problemFor(busy)?.detail).not.toMatch(/SQLite|storeTimeoutMs/);
    expect(new StoreBusyError('busy', 10).headers).toEqual({ 'retry-after': '1' });
  });

  it('every error class the entry points export is in the table, or a base', () => {
    const bases = new Set(['IdemkitError', 'CodedError', 'IdempotencyHttpError', 'IdempotentCallError']);
    const tableNames = new Set(tableClasses.keys());
    for (const [from, api] of Object.entries(entryPoints)) {
      for (const [name, value] of Object.entries(api)) {
        if (typeof value !== 'function' || !(value.prototype instanceof IdemkitError || value === IdemkitError)) continue;
        const known = tableNames.has(name) || bases.has(name);
        expect(known, `${from} exports ${name}, an error class the table does not list`).toBe(true);
      }
    }
  });
});

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

const sources = sourceFiles(join(root, 'src')).map((path) => ({ file: relative(root, path).split('\\').join('/'), text: readFileSync(path, 'utf8') }));

/**
 * Throw sites in files another change owns (the engine and HTTP rewrite), still building an
 * `IdemkitError` from a bare code: each code is in the table, and its class is the one to use.
 * The list must match exactly, so a converted site is struck off here and no new one appears.
 */
const PENDING_AD_HOC: ReadonlyArray<readonly [file: string, code: ErrorCode]> = [];

/**
 * Plain errors src may throw: internal signals that never reach a user, or what Node and the
 * frameworks throw themselves for the same mistake. `pending` ones are user-facing refusals whose
 * class exists (in the table) and whose file another change owns.
 */
const PLAIN_ERRORS: ReadonlyArray<{ file: string; text: string; why: string }> = [
  { file: 'src/core/canonical-json.ts', text: "new Error('canonical JSON: left to the iterative writer')", why: 'a sentinel, caught inside the writer' },
  { file: 'src/check/race.ts', text: "new Error('ended without 100 Continue')", why: 'rejects one branch of a Promise.any, never surfaces' },
  { file: 'src/drivers/postgres.ts', text: 'new Error(String(reason))', why: "hands pg's release() the Error it expects" },
  { file: 'src/kit/contract/context.ts', text: 'throw new Error(`expected acquired, got ${claim.kind}`)', why: 'fails a test of the store contract suite' },
  { file: 'src/stores/redis/record.ts', text: 'new RangeError(', why: 'an encoder invariant; callers validate first' },
  { file: 'src/core/engine.ts', text: 'new TypeError(`The \\`${option}\\` option must return a string`)', why: 'a scope or previousScope hook returning the wrong type, as Node throws ERR_INVALID_RETURN_VALUE' },
  { file: 'src/http/express-capture.ts', text: "new TypeError('idemkit: response chunks must be strings", why: 'what res.write throws for such a chunk' },
  { file: 'src/http/fastify-response.ts', text: 'new TypeError(`idemkit: cannot store a response payload', why: "what Fastify's reply.send throws for such a payload" },
  { file: 'src/http/koa-response.ts', text: "new TypeError('idemkit: a response body stream must yield", why: 'what writing such a chunk to the response throws when Koa pipes the stream' },
  { file: 'src/http/koa-response.ts', text: "new Error(format('non-error thrown: %j', thrown))", why: "the Error Koa's ctx.onerror wraps a thrown non-Error in, message and all" },
  { file: 'src/patterns/completer-runner.ts', text: 'throw new Error(`completer.start(): the completer is already', why: "start() while its loop runs or stops, as a server's listen() twice throws ERR_SERVER_ALREADY_LISTEN" },
];

describe('throw sites in src', () => {
  it('no code is built outside its class: `new IdemkitError(` only at the pending sites', () => {
    const found: Array<readonly [string, string]> = [];
    for (const { file, text } of sources) {
      for (const match of text.matchAll(/new IdemkitError\(\s*([^,]*),/g)) found.push([file, match[1]!.replace(/^'|'$/g, '')]);
    }
    const sorted = (list: ReadonlyArray<readonly [string, string]>) => list.map(([file, code]) => `${file}: ${code}`).sort();
    expect(sorted(found)).toEqual(sorted(PENDING_AD_HOC));
  });

  it('no class passes a literal code to its base: each uses its static `code`', () => {
    const literal = sources.flatMap(({ file, text }) => [...text.matchAll(/super\(\s*'([A-Z_]+)'/g)].map((m) => `${file}: ${m[1]}`));
    expect(literal).toEqual([]);
  });

  it('each code is declared by one class, the one the table names', () => {
    const declared = new Map<string, string[]>();
    for (const { file, text } of sources) {
      for (const part of text.split(/^(?=export class )/m)) {
        const name = /^export class (\w+)/.exec(part)?.[1];
        const code = /(?:^ {2}|{ )static readonly code = '([A-Z_]+)'/m.exec(part)?.[1];
        if (name === undefined || code === undefined) continue;
        declared.set(code, [...(declared.get(code) ?? []), `${name} (${file})`]);
        expect(errorCodeEntry(code)?.class, `${name} in ${file}`).toBe(name);
      }
    }
    for (const [code, classes] of declared) expect(classes, code).toHaveLength(1);
    const single = codes.filter((code) => ERROR_CODES[code].class !== 'PhaseError');
    expect([...declared.keys()].sort()).toEqual(single.sort());
  });

  it('every code literal in src is in the table', () => {
    const unknown: string[] = [];
    for (const { file, text } of sources) {
      if (file === 'src/core/error-codes.ts') continue;
      for (const match of text.matchAll(/'(ERR_IDEMKIT_[A-Z_]+)'/g)) if (!errorCodeEntry(match[1]!)) unknown.push(`${file}: ${match[1]}`);
      for (const match of text.matchAll(/new PhaseError\(\s*'([A-Z_]+)'/g)) {
        if (errorCodeEntry(match[1]!)?.class !== 'PhaseError') unknown.push(`${file}: PhaseError ${match[1]}`);
      }
    }
    expect(unknown).toEqual([]);
  });

  it('plain Errors are only the listed internal signals and pending sites', () => {
    const unlisted: string[] = [];
    for (const { file, text } of sources) {
      for (const line of text.split('\n')) {
        if (!/new (Type|Range)?Error\(/.test(line)) continue;
        if (!PLAIN_ERRORS.some((allowed) => allowed.file === file && line.includes(allowed.text))) unlisted.push(`${file}: ${line.trim()}`);
      }
    }
    expect(unlisted).toEqual([]);
  });
});

describe('docs/semantics.md, "Error codes"', () => {
  const doc = readFileSync(join(root, 'docs/semantics.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## Error codes'));
  const rows = [...section.matchAll(/^\| `([A-Z_]+)` \| `(\w+)` \| `([\w/]+)` \| [^|]+ \| ([^|]+) \| ([^|]+) \|$/gm)].map((m) => ({
    code: m[1]!,
    class: m[2]!,
    from: m[3]!,
    answer: m[4]!.trim(),
    type: m[5]!.trim(),
  }));

  it('lists every code once, with its class, entry point, HTTP answer and problem type', () => {
    expect(rows.map((row) => row.code)).toEqual(codes);
    for (const row of rows) {
      const entry: ErrorCodeEntry = ERROR_CODES[row.code as ErrorCode];
      expect({ class: row.class, from: row.from, answer: row.answer, type: row.type }, row.code).toEqual({
        class: entry.class,
        from: entry.from,
        answer: entry.http ? `${entry.http.status} \`${entry.http.slug}\`` : '—',
        type: entry.http ? `\`urn:idemkit:problem:${entry.http.slug}\`` : '—',
      });
    }
  });
});
