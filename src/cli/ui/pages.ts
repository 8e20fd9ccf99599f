// The list and the record views, rendered on the server; every value from a record goes through esc.
import { isUtf8 } from 'node:buffer';
import type { ServerResponse } from 'node:http';
import { InvalidRecordRefError } from '../../core/errors.js';
import type { RecordDetails, RecordState, RecordSummary, StoreAdmin } from '../../core/store.js';
import { formatDuration } from '../../check/flags.js';
import { UNKNOWN_TIME, ago } from '../format.js';
import { esc, page } from './html.js';
import { send } from './http.js';
import { DEFAULT_LIST_LIMIT, readFilter, readRef } from './query.js';

/** How much of a body the detail view shows: UTF-8 text up to this many bytes, binary as hex. */
const UI_TEXT_BYTES = 64 * 1024;
const UI_HEX_BYTES = 256;

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

export async function listPage(admin: StoreAdmin, label: string, q: URLSearchParams, res: ServerResponse): Promise<void> {
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

export async function recordPage(admin: StoreAdmin, label: string, q: URLSearchParams, res: ServerResponse): Promise<void> {
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
