/**
 * The Durable Object that keeps the records of one shard, in its own SQLite database. Every
 * operation is one `transactionSync` over synchronous SQL: nothing can run between its read and
 * its write (an object runs one event at a time, and synchronous code has no await for another to
 * slip into), and the transaction makes the writes all-or-nothing. The object's alarm ends windows.
 */
import { newOwnerToken } from '../../core/token.js';
import type { Operation, WireClaim, WireRecord, WireResponse } from './wire.js';
import { fromBase64, toBase64 } from './wire.js';

/** The cursor `ctx.storage.sql.exec` answers, as far as the object reads it. */
interface SqlCursorLike {
  toArray(): Array<Record<string, unknown>>;
}

/** The `DurableObjectState` the runtime passes, as far as the object uses it (SQLite-backed storage). */
export interface DurableObjectStateLike {
  readonly storage: {
    readonly sql: { exec(query: string, ...bindings: unknown[]): SqlCursorLike };
    transactionSync<T>(fn: () => T): T;
    getAlarm(): Promise<number | null>;
    setAlarm(scheduledTime: number): Promise<void>;
  };
  blockConcurrencyWhile<T>(fn: () => Promise<T>): Promise<T>;
}

const TABLE = 'idemkit_records';

// `ends_at`: when the record stops counting (its window; an in-flight record not before its lease
// ends either, as in every store): claims treat it as absent from then, and `reap` deletes it.
// `drop_at`: `graceMs` later, when the alarm deletes it by itself (the store's `graceMs`).
const SCHEMA = [
  `CREATE TABLE IF NOT EXISTS ${TABLE} (
    scope TEXT NOT NULL, key TEXT NOT NULL, state TEXT NOT NULL, fingerprint TEXT NOT NULL, token TEXT NOT NULL,
    lease_until INTEGER NOT NULL, expires_at INTEGER NOT NULL, ends_at INTEGER NOT NULL, drop_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, attempt INTEGER NOT NULL,
    recovery_point TEXT, recovery_data TEXT, status INTEGER, headers TEXT, body BLOB, body_omitted INTEGER,
    PRIMARY KEY (scope, key))`,
  `CREATE INDEX IF NOT EXISTS ${TABLE}_ends ON ${TABLE} (ends_at)`,
  `CREATE INDEX IF NOT EXISTS ${TABLE}_drop ON ${TABLE} (drop_at)`,
];

/** Rows deleted per statement when the alarm ends windows: one alarm stays a short event. */
const ALARM_BATCH = 1000;

type Row = Record<string, unknown>;

const json = (value: unknown, status = 200) => new Response(JSON.stringify(value), { status, headers: { 'content-type': 'application/json' } });

/**
 * The Durable Object class of `durableObjectStore`: export it from the Worker's main module and
 * bind it as a SQLite-backed class (`new_sqlite_classes`), docs/stores/durable-objects.md.
 */
export class IdempotencyObject {
  readonly #ctx: DurableObjectStateLike;
  /** The alarm as set: `null` when none. Read once at start, so a restart never pushes one later. */
  #alarmAt: number | null = null;

  constructor(ctx: DurableObjectStateLike, _env?: unknown) {
    this.#ctx = ctx;
    for (const statement of SCHEMA) ctx.storage.sql.exec(statement);
    void ctx.blockConcurrencyWhile(async () => {
      this.#alarmAt = await ctx.storage.getAlarm();
    });
  }

  async fetch(request: Request): Promise<Response> {
    const op = new URL(request.url).pathname.slice(1) as Operation;
    const input = (await request.json()) as Record<string, unknown>;
    const now = Date.now();
    const sql = this.#ctx.storage.sql;
    const rows = (query: string, ...bindings: unknown[]) => sql.exec(query, ...bindings).toArray();
    const tx = <T>(fn: () => T) => this.#ctx.storage.transactionSync(fn);
    const scope = input['scope'] as string;
    const key = input['key'] as string;
    const token = input['token'] as string;
    const owned = `scope = ? AND key = ? AND state = 'in_flight' AND token = ?`;
    const grace = (input['graceMs'] as number | undefined) ?? 0;
    switch (op) {
      case 'claim': {
        const leaseMs = input['leaseMs'] as number;
        const answer = tx(() => this.#claim(now, scope, key, input['fingerprint'] as string, leaseMs, input['windowMs'] as number, input['incarnation'] as string | undefined, grace));
        if (answer.kind === 'acquired') await this.#schedule(Math.max(now + (input['windowMs'] as number), now + leaseMs) + grace);
        return json(answer);
      }
      case 'renew': {
        const until = now + (input['leaseMs'] as number);
        const ok = tx(() => rows(`UPDATE ${TABLE} SET lease_until = ?, updated_at = ?, ends_at = max(expires_at, ?), drop_at = max(expires_at, ?) + ? WHERE ${owned} RETURNING drop_at`, until, now, until, until, grace, scope, key, token));
        // A lease given back (0 ms) may end the record sooner.
        if (ok.length > 0) await this.#schedule(ok[0]!['drop_at'] as number);
        return json({ ok: ok.length > 0 });
      }
      case 'checkpoint': {
        const data = input['data'] === undefined ? null : JSON.stringify(input['data']);
        const ok = tx(() => rows(`UPDATE ${TABLE} SET recovery_point = ?, recovery_data = ?, updated_at = ? WHERE ${owned} RETURNING 1`, input['point'], data, now, scope, key, token));
        return json({ ok: ok.length > 0 });
      }
      case 'complete': {
        const response = input['response'] as WireResponse;
        const body = response.body === null ? null : fromBase64(response.body).buffer;
        const ok = tx(() =>
          rows(
            `UPDATE ${TABLE} SET state = 'completed', token = '', status = ?, headers = ?, body = ?, body_omitted = ?, updated_at = ?, ends_at = expires_at, drop_at = expires_at + ? WHERE ${owned} RETURNING drop_at`,
            response.status,
            JSON.stringify(response.headers),
            body,
            response.bodyOmitted ? 1 : 0,
            now,
            grace,
            scope,
            key,
            token,
          ),
        );
        if (ok.length > 0) await this.#schedule(ok[0]!['drop_at'] as number);
        return json({ ok: ok.length > 0 });
      }
      case 'release':
        return json({ ok: tx(() => rows(`DELETE FROM ${TABLE} WHERE ${owned} RETURNING 1`, scope, key, token)).length > 0 });
      case 'get': {
        const row = rows(`SELECT * FROM ${TABLE} WHERE scope = ? AND key = ?`, scope, key)[0];
        return json(row === undefined ? null : toWireRecord(row));
      }
      case 'reap': {
        const limit = input['limit'] as number;
        return json({ n: tx(() => rows(`DELETE FROM ${TABLE} WHERE rowid IN (SELECT rowid FROM ${TABLE} WHERE ends_at <= ? LIMIT ?) RETURNING 1`, now, limit)).length });
      }
      case 'abandoned': {
        const found = rows(`SELECT * FROM ${TABLE} WHERE state = 'in_flight' AND lease_until <= ? AND expires_at > ? ORDER BY lease_until LIMIT ?`, now, now, input['limit']);
        return json(found.map(toWireRecord));
      }
      case 'end-leases': {
        const incarnation = input['incarnation'] as string;
        const ended = tx(() =>
          rows(
            `UPDATE ${TABLE} SET lease_until = ?, updated_at = ?, ends_at = max(expires_at, ?), drop_at = max(expires_at, ?) + ? WHERE state = 'in_flight' AND lease_until > ? AND substr(token, 1, 16) = ? RETURNING drop_at`,
            now,
            now,
            now,
            now,
            grace,
            now,
            incarnation,
          ),
        );
        for (const row of ended) await this.#schedule(row['drop_at'] as number);
        return json({ n: ended.length });
      }
      default:
        return json({ error: `unknown operation ${JSON.stringify(op)}` }, 404);
    }
  }

  /** Ends windows: deletes what ended `graceMs` ago, then sets the alarm for the next one. */
  async alarm(): Promise<void> {
    this.#alarmAt = null;
    const now = Date.now();
    const sql = this.#ctx.storage.sql;
    let deleted: number;
    do {
      deleted = sql.exec(`DELETE FROM ${TABLE} WHERE rowid IN (SELECT rowid FROM ${TABLE} WHERE drop_at <= ? LIMIT ?) RETURNING 1`, now, ALARM_BATCH).toArray().length;
    } while (deleted === ALARM_BATCH);
    const next = sql.exec(`SELECT min(drop_at) AS next FROM ${TABLE}`).toArray()[0]?.['next'];
    if (typeof next === 'number') await this.#schedule(next);
  }

  /** The claim: one synchronous read and write, inside `transactionSync`. */
  #claim(now: number, scope: string, key: string, fingerprint: string, leaseMs: number, windowMs: number, incarnation: string | undefined, grace: number): WireClaim {
    const sql = this.#ctx.storage.sql;
    const row = sql.exec(`SELECT * FROM ${TABLE} WHERE scope = ? AND key = ?`, scope, key).toArray()[0];
    if (row !== undefined && (row['ends_at'] as number) > now) {
      if (row['fingerprint'] !== fingerprint) return { kind: 'mismatch' };
      if (row['state'] === 'completed') return { kind: 'completed', response: responseOf(row) };
      const leaseUntil = row['lease_until'] as number;
      if (leaseUntil > now) return { kind: 'in_flight', retryAfterMs: leaseUntil - now, renewedMsAgo: Math.max(0, now - (row['updated_at'] as number)) };
      const token = newOwnerToken(incarnation);
      sql.exec(
        `UPDATE ${TABLE} SET token = ?, lease_until = ?, ends_at = max(expires_at, ?), drop_at = max(expires_at, ?) + ?, updated_at = ?, attempt = attempt + 1 WHERE scope = ? AND key = ?`,
        token,
        now + leaseMs,
        now + leaseMs,
        now + leaseMs,
        grace,
        now,
        scope,
        key,
      );
      const point = row['recovery_point'] as string | null;
      const data = row['recovery_data'] as string | null;
      // JSON leaves out what is undefined: the Worker's side reads both as absent.
      return { kind: 'acquired', token, takeover: true, resumeFrom: point ?? undefined, recoveryData: data === null ? undefined : (JSON.parse(data) as unknown) };
    }
    // Past its end the old record is gone for every purpose: the new one replaces it.
    if (row !== undefined) sql.exec(`DELETE FROM ${TABLE} WHERE scope = ? AND key = ?`, scope, key);
    const token = newOwnerToken(incarnation);
    sql.exec(
      `INSERT INTO ${TABLE} (scope, key, state, fingerprint, token, lease_until, expires_at, ends_at, drop_at, created_at, updated_at, attempt) VALUES (?, ?, 'in_flight', ?, ?, ?, ?, ?, ?, ?, ?, 1)`,
      scope,
      key,
      fingerprint,
      token,
      now + leaseMs,
      now + windowMs,
      Math.max(now + windowMs, now + leaseMs),
      Math.max(now + windowMs, now + leaseMs) + grace,
      now,
      now,
    );
    return { kind: 'acquired', token, takeover: false };
  }

  /** Moves the alarm earlier when a record ends before it (never later: another record may end first). */
  async #schedule(endsAt: number): Promise<void> {
    if (this.#alarmAt !== null && this.#alarmAt <= endsAt) return;
    this.#alarmAt = endsAt;
    await this.#ctx.storage.setAlarm(endsAt);
  }
}

function responseOf(row: Row): WireResponse {
  const omitted = row['body_omitted'] === 1;
  const body = row['body'];
  // SQLite may give an empty blob back as null: a kept body is never null.
  const bytes = body instanceof ArrayBuffer ? new Uint8Array(body) : new Uint8Array(0);
  return {
    status: row['status'] as number,
    headers: JSON.parse(row['headers'] as string) as Array<[string, string]>,
    body: omitted ? null : toBase64(bytes),
    bodyOmitted: omitted,
  };
}

function toWireRecord(row: Row): WireRecord {
  const point = row['recovery_point'] as string | null;
  const data = row['recovery_data'] as string | null;
  const completed = row['state'] === 'completed';
  return {
    scope: row['scope'] as string,
    key: row['key'] as string,
    state: completed ? 'completed' : 'in_flight',
    fingerprint: row['fingerprint'] as string,
    leaseUntil: row['lease_until'] as number,
    expiresAt: row['expires_at'] as number,
    recoveryPoint: point ?? undefined,
    recoveryData: data === null ? undefined : (JSON.parse(data) as unknown),
    response: completed ? responseOf(row) : undefined,
    createdAt: row['created_at'] as number,
    updatedAt: row['updated_at'] as number,
  };
}
