// The `idemkit` store commands: migrate, inspect, list, purge, reap, stats (docs/cli.md).
import { CliUsageError } from '../check/errors.js';
import type { RecordState } from '../core/store.js';
import { formatDuration, parseDuration, parseWholeNumber } from '../check/flags.js';
import type { Io } from './command.js';
import { failed, parseStoreFlags, scrubbedIo, storeUrlOption } from './command.js';
import type { OpenedStore } from './open/driver.js';
import { openStore } from './open/store.js';
import type { StoreNames, StoreUrl } from './store-url.js';
import { URL_FORMS, parseStoreUrl } from './store-url.js';
import { UNKNOWN_TIME, ago, bodyPreview, describeFailure, inspectJson, iso, statsJson, summaryJson } from './format.js';
import { printable, quoted, terminalJson } from './terminal.js';

export const STORE_COMMANDS = ['migrate', 'inspect', 'list', 'purge', 'reap', 'stats'] as const;
export type StoreCommand = (typeof STORE_COMMANDS)[number];

/** Exit codes: 0 done, 1 not found or refused, 2 bad usage or the store could not be used. */
export const EXIT = { ok: 0, refused: 1, usage: 2 } as const;

const STORE_OPTIONS = `Store:
      --store URL            ${URL_FORMS}
                             (default: $IDEMKIT_STORE_URL)
      --table NAME           SQL stores, DynamoDB: the records' table (default idempotency_records)
      --schema NAME          PostgreSQL: the table's schema (default public)
      --prefix PREFIX        Redis: the records' key prefix (default idemkit)`;

export const STORE_USAGE: Record<StoreCommand, string> = {
  migrate: `Usage: idemkit migrate --store URL

Creates the records' table (and, on PostgreSQL, its claim function) if missing, or brings the
function up to date, and adds the columns a table made by an earlier idemkit lacks (created_at,
updated_at; its rows keep them empty: unknown); prints what it created, added, and found already
there. On DynamoDB: creates the table (on-demand capacity) and turns its TTL on. Safe to run
twice. Redis needs no migration.`,
  inspect: `Usage: idemkit inspect KEY --scope SCOPE --store URL [--json]

Shows one record: state, fingerprint, owner (token prefix, attempt), when it was created (claimed;
a take-over keeps the first claim's time) and last updated, lease and window, recovery point, and
the stored status, headers and a preview of the body. Times a record written by an earlier
idemkit does not have show as unknown.`,
  list: `Usage: idemkit list --store URL [--state in_flight|completed] [--scope SCOPE] [--older-than 5m] [--limit N] [--json]

Lists records, oldest lease first, with their age (since they were claimed, by this machine's
clock). --older-than D keeps records claimed at least D ago, on the store's clock; a record an
earlier idemkit wrote (no creation time) is judged by its lease instead: kept when its lease
ended at least D ago. --limit defaults to 100.`,
  purge: `Usage: idemkit purge KEY --scope SCOPE --store URL --yes [--force]

Deletes one record, so the key is new again. Refuses without --yes, and refuses a record in flight
(its owner may still be running) unless --force.`,
  reap: `Usage: idemkit reap --store URL [--limit N] [--json]

Deletes expired records (window over, no live lease), as store.reap does, in batches of 1000;
prints how many. --limit caps the total.`,
  stats: `Usage: idemkit stats --store URL [--json]

Counts records by state (in flight, of which abandoned; completed; expired awaiting reap), names
the in-flight record whose owner has been gone longest, and sums the stored bytes.`,
};

const COMMON_FOOTER = `${STORE_OPTIONS}
      --json                 machine-readable output (docs/cli.md describes it)
  -h, --help

Exit codes: 0 done · 1 not found, or refused (purge) · 2 bad usage, or the store could not be used
(bad URL, driver not installed, unreachable, table missing).`;

interface Parsed {
  readonly positionals: string[];
  readonly values: {
    store?: string;
    table?: string;
    schema?: string;
    prefix?: string;
    scope?: string;
    state?: string;
    'older-than'?: string;
    limit?: string;
    json?: boolean;
    yes?: boolean;
    force?: boolean;
    help?: boolean;
  };
}

function parse(argv: readonly string[]): Parsed {
  return parseStoreFlags(
    argv,
    {
      scope: { type: 'string' },
      state: { type: 'string' },
      'older-than': { type: 'string' },
      limit: { type: 'string' },
      json: { type: 'boolean' },
      yes: { type: 'boolean', short: 'y' },
      force: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    true,
  );
}

const ALLOWED: Record<StoreCommand, ReadonlyArray<keyof Parsed['values']>> = {
  migrate: ['json'],
  inspect: ['scope', 'json'],
  list: ['scope', 'state', 'older-than', 'limit', 'json'],
  purge: ['scope', 'yes', 'force', 'json'],
  reap: ['limit', 'json'],
  stats: ['json'],
};

/** Runs one store command; resolves to its exit code. Never throws for a store or usage problem. */
export async function runStoreCommand(command: StoreCommand, argv: readonly string[], terminal: Io, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let opened: OpenedStore | undefined;
  let parsedUrl: StoreUrl | undefined;
  const io = scrubbedIo(terminal, () => parsedUrl);
  try {
    const { values: v, positionals } = parse(argv);
    if (v.help) {
      io.out(`${STORE_USAGE[command]}\n\n${COMMON_FOOTER}`);
      return EXIT.ok;
    }
    for (const flag of ['scope', 'state', 'older-than', 'limit', 'yes', 'force', 'json'] as const) {
      if (v[flag] !== undefined && !ALLOWED[command].includes(flag)) throw new CliUsageError(`--${flag} does not apply to idemkit ${command}`);
    }
    const takesKey = command === 'inspect' || command === 'purge';
    if (positionals.length !== (takesKey ? 1 : 0)) {
      throw new CliUsageError(takesKey ? `one KEY expected, got ${positionals.length}` : `unexpected argument ${JSON.stringify(positionals[0])}`);
    }
    if (takesKey && v.scope === undefined) throw new CliUsageError('--scope is required (the tenant the key belongs to; --scope "" for the empty scope)');
    const url = storeUrlOption(v.store, env);
    const names: StoreNames = { table: v.table, schema: v.schema, prefix: v.prefix };
    const filter = command === 'list' ? listFilter(v) : undefined;
    const limit = command === 'reap' && v.limit !== undefined ? whole('--limit', v.limit, 1) : undefined;
    parsedUrl = parseStoreUrl(url);
    opened = await openStore(parsedUrl, names, { create: command === 'migrate' });
    if (command !== 'migrate') await opened.verify();
    const ref = takesKey ? { scope: v.scope!, key: positionals[0]! } : undefined;
    const json = v.json === true;
    switch (command) {
      case 'migrate':
        return await migrate(opened, io, json);
      case 'inspect':
        return await inspect(opened, ref!, io, json);
      case 'list':
        return await list(opened, filter!, io, json);
      case 'purge':
        return await purge(opened, ref!, io, { yes: v.yes === true, force: v.force === true, json });
      case 'reap':
        return await reap(opened, limit, io, json);
      case 'stats':
        return await stats(opened, io, json);
    }
    throw new CliUsageError(`unknown command ${command as string}`);
  } catch (error) {
    return failed(io, command, describe(error, opened), error);
  } finally {
    await opened?.close().catch(() => {});
  }
}

/** One line for any failure, a missing table named where this command looked. */
function describe(error: unknown, opened: OpenedStore | undefined): string {
  return describeFailure(error, {
    schemaMissing: (e) => `${opened ? `the store at ${opened.url.shown} has no ${opened.where}` : e.message}; run \`idemkit migrate\` first (${e.missing.join(', ')} missing)`,
    firstLine: false,
  });
}

function whole(flag: string, value: string, min: number): number {
  const n = parseWholeNumber(value);
  if (n === undefined || n < min) throw new CliUsageError(`${flag}: expected a whole number >= ${min}, got ${JSON.stringify(value)}`);
  return n;
}

function listFilter(v: Parsed['values']) {
  if (v.state !== undefined && v.state !== 'in_flight' && v.state !== 'completed') {
    throw new CliUsageError(`--state: expected in_flight or completed, got ${JSON.stringify(v.state)}`);
  }
  let olderThanMs: number | undefined;
  if (v['older-than'] !== undefined) {
    const ms = parseDuration(v['older-than'], 's');
    if (ms === undefined) throw new CliUsageError(`--older-than: expected a duration like 30s, 5m, 2h or 1d, got ${JSON.stringify(v['older-than'])}`);
    olderThanMs = Math.round(ms);
  }
  return {
    state: v.state as RecordState | undefined,
    scope: v.scope,
    olderThanMs,
    limit: v.limit === undefined ? 100 : whole('--limit', v.limit, 1),
  };
}

// ---- migrate ----------------------------------------------------------------------------------

async function migrate(s: OpenedStore, io: Io, json: boolean): Promise<number> {
  const done = await s.migrate();
  if (json) {
    io.out(terminalJson({ store: s.url.kind, url: s.url.shown, created: done.created, present: done.present, added: done.added }, 2));
    return EXIT.ok;
  }
  if (s.url.kind === 'redis') {
    io.out(`redis ${s.url.shown}: nothing to migrate (records are keys under ${s.where}; the scripts load on first use)`);
    return EXIT.ok;
  }
  const parts = [...done.created.map((what) => `${what}: created`), ...done.present.map((what) => `${what}: already present`)];
  if (s.url.kind === 'postgres' && done.present.some((what) => what.startsWith('function'))) {
    parts[parts.length - 1] += ' (replaced with this version)';
  }
  parts.push(...done.added.map((what) => `${what}: added`));
  io.out(`${s.url.kind} ${s.url.shown}: ${parts.join('; ')}`);
  return EXIT.ok;
}

// ---- inspect ----------------------------------------------------------------------------------

function relative(at: number, now: number, past: string, future: string): string {
  return at <= now ? `${past} ${formatDuration(now - at)} ago` : `${future} ${formatDuration(at - now)}`;
}

/** A time a record may not have, for `inspect`. */
function stamp(at: number | null, now: number): string {
  return at === null ? UNKNOWN_TIME : `${iso(at)} (${ago(at, now)})`;
}

async function inspect(s: OpenedStore, ref: { scope: string; key: string }, io: Io, json: boolean): Promise<number> {
  const r = await s.store.admin.inspect(ref);
  if (r === undefined) {
    if (json) io.out(terminalJson(null));
    io.err(`idemkit inspect: no record for key ${quoted(ref.key)} in scope ${quoted(ref.scope)} (${s.where})`);
    return EXIT.refused;
  }
  if (json) {
    io.out(terminalJson(inspectJson(r), 2));
    return EXIT.ok;
  }
  const lines: Array<[string, string]> = [
    ['scope', quoted(r.scope)],
    ['key', quoted(r.key)],
    ['state', r.expired ? `${r.state} (expired: claims treat it as absent; reap deletes it)` : r.state],
    ['fingerprint', printable(r.fingerprint)],
    ['owner', `token ${printable(r.tokenPrefix) || '(none)'}…, attempt ${r.attempt}`],
    ['created', stamp(r.createdAt, r.now)],
    ['updated', stamp(r.updatedAt, r.now)],
    ['lease until', `${iso(r.leaseUntil)} (${relative(r.leaseUntil, r.now, 'ended', 'ends in')})`],
    ['expires at', `${iso(r.expiresAt)} (${relative(r.expiresAt, r.now, 'window ended', 'window ends in')})`],
    ['recovery', r.recoveryPoint === undefined ? '(no checkpoint)' : `${printable(r.recoveryPoint)}${r.recoveryData === undefined ? '' : ` ${terminalJson(r.recoveryData)}`}`],
  ];
  const response = r.response;
  if (response) {
    lines.push(['status', String(response.status)]);
    lines.push(['headers', response.headers.length === 0 ? '(none)' : response.headers.map(([n, v]) => `${printable(n)}: ${printable(v)}`).join('\n' + ' '.repeat(13))]);
    if (response.body === null) lines.push(['body', 'omitted (larger than the store\u2019s maxResponseBytes when completed)']);
    else {
      const p = bodyPreview(response.body);
      const more = p.truncated ? ' …' : '';
      lines.push(['body', p.bytes === 0 ? '0 bytes' : `${p.bytes} bytes, ${p.encoding === 'utf8' ? `text: ${printable(p.preview)}${more}` : `binary: ${p.preview}${more}`}`]);
    }
  }
  io.out(lines.map(([label, value]) => `${label.padEnd(12)} ${value}`).join('\n'));
  return EXIT.ok;
}

// ---- list -------------------------------------------------------------------------------------

async function list(s: OpenedStore, filter: ReturnType<typeof listFilter>, io: Io, json: boolean): Promise<number> {
  const records = await s.store.admin.list(filter);
  if (json) {
    io.out(terminalJson({ records: records.map(summaryJson) }, 2));
    return EXIT.ok;
  }
  if (records.length === 0) {
    io.out('no records');
    return EXIT.ok;
  }
  // Ages by this machine's clock: a listing carries no store time (olderThanMs decides on the store's).
  const now = Date.now();
  const rows = records.map((r) => [
    r.expired ? `${r.state}*` : r.state,
    quoted(r.scope),
    quoted(r.key),
    r.createdAt === null ? '?' : formatDuration(Math.max(0, now - r.createdAt)),
    iso(r.leaseUntil),
    iso(r.expiresAt),
    String(r.attempt),
    r.status === undefined ? '-' : String(r.status),
    r.bodyBytes === null ? '-' : String(r.bodyBytes),
    r.recoveryPoint === undefined ? '-' : printable(r.recoveryPoint),
  ]);
  const header = ['STATE', 'SCOPE', 'KEY', 'AGE', 'LEASE UNTIL', 'EXPIRES AT', 'ATTEMPT', 'STATUS', 'BODY', 'RECOVERY'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd();
  io.out([line(header), ...rows.map(line)].join('\n'));
  if (records.some((r) => r.expired)) io.out('* expired: past its window; claims treat it as absent, reap deletes it');
  if (records.some((r) => r.createdAt === null)) io.out('? age unknown: written by an earlier idemkit, which kept no creation time');
  if (records.length === filter.limit) io.out(`(first ${filter.limit}; raise --limit for more)`);
  return EXIT.ok;
}

// ---- purge ------------------------------------------------------------------------------------

async function purge(s: OpenedStore, ref: { scope: string; key: string }, io: Io, o: { yes: boolean; force: boolean; json: boolean }): Promise<number> {
  const what = `key ${quoted(ref.key)} in scope ${quoted(ref.scope)}`;
  if (!o.yes) {
    if (o.json) io.out(JSON.stringify({ outcome: 'refused', reason: 'no --yes' }));
    io.err(`idemkit purge: refusing to delete the record of ${what} without --yes (a retry of that request would then run again)`);
    return EXIT.refused;
  }
  const outcome = await s.store.admin.purge(ref, { force: o.force });
  if (o.json) io.out(JSON.stringify({ outcome }));
  if (outcome === 'purged') {
    if (!o.json) io.out(`purged the record of ${what}`);
    return EXIT.ok;
  }
  if (outcome === 'in_flight') {
    io.err(`idemkit purge: the record of ${what} is in flight (its owner may still be running); add --force to delete it anyway`);
  } else {
    io.err(`idemkit purge: no record for ${what} (${s.where})`);
  }
  return EXIT.refused;
}

// ---- reap -------------------------------------------------------------------------------------

const REAP_BATCH = 1000;

async function reap(s: OpenedStore, limit: number | undefined, io: Io, json: boolean): Promise<number> {
  let reaped = 0;
  for (;;) {
    const batch = limit === undefined ? REAP_BATCH : Math.min(REAP_BATCH, limit - reaped);
    if (batch <= 0) break;
    const n = await s.store.reap(batch);
    reaped += n;
    if (n < batch) break;
  }
  io.out(json ? JSON.stringify({ reaped }) : `reaped ${reaped} expired record${reaped === 1 ? '' : 's'}`);
  return EXIT.ok;
}

// ---- stats ------------------------------------------------------------------------------------

async function stats(s: OpenedStore, io: Io, json: boolean): Promise<number> {
  const st = await s.store.admin.stats();
  if (json) {
    io.out(terminalJson(statsJson(st), 2));
    return EXIT.ok;
  }
  const oldest = st.oldestInFlight;
  const lines: Array<[string, string]> = [
    ['in flight', `${st.inFlight} (${st.abandoned} abandoned: lease over, window open)`],
    ['completed', String(st.completed)],
    ['expired', `${st.expired} (awaiting reap)`],
    [
      'oldest in flight',
      oldest ? `key ${quoted(oldest.key)} in scope ${quoted(oldest.scope)}, lease ${relative(oldest.leaseUntil, st.now, 'ended', 'ends in')}` : '(none)',
    ],
    ['body bytes', String(st.bodyBytes)],
  ];
  if (st.storageBytes !== undefined) lines.push(['storage bytes', String(st.storageBytes)]);
  io.out(`${s.url.kind} ${s.url.shown}, ${s.where}\n${lines.map(([label, value]) => `${label.padEnd(17)} ${value}`).join('\n')}`);
  return EXIT.ok;
}
