/**
 * Fuzzing the SQLite store's record decoder through the real store: a completed record is written
 * by the store, then columns are overwritten in the real table with arbitrary values (SQLite keeps
 * any value in any column of a table that is not STRICT; CHECK constraints are switched off for
 * the connection), then the record is claimed and read. See record-check.ts for what is owed.
 */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CorruptRecordError } from '../../src/core/errors.js';
import type { RecordRef } from '../../src/core/store.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import type { SqliteStore } from '../../src/stores/sqlite/index.js';
import { anyUtf16, FUZZ_TIMEOUT, fuzzAsync } from './fuzz.js';
import { CLAIM_OPTIONS, checkRecordTimes, checkReplay, checkTimes, expectedResponse, GOOD_RESPONSE, settle } from './record-check.js';

const TABLE = `fuzz_records_${randomUUID().slice(0, 8)}`;
const COLUMNS = [
  'state', 'fingerprint', 'lease_until', 'expires_at', 'recovery_point', 'recovery_data', 'status', 'headers', 'body', 'body_omitted', 'created_at', 'updated_at',
] as const;

/** Values SQLite can hold, with the ones that look almost right weighted up. */
const sqliteValue = fc.oneof(
  fc.constant(null),
  fc.integer({ min: -5, max: 1_000 }),
  fc.constantFrom(0, 1, 2, 99, 100, 200, 999, 1000, -1, Number.MAX_SAFE_INTEGER),
  fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
  fc.double({ noNaN: true }),
  anyUtf16({ maxLength: 20 }),
  fc.constantFrom('in_flight', 'completed', 'fp', '200', '1', '[]', '[["a","b"]]', '[["a b","x"]]', '[["a","x\\ny"]]', '[["a"]]', '{"a":1}', '"x"', 'null', '{', '[["set-cookie","k=v"],["x",""]]'),
  fc.jsonValue({ maxDepth: 2 }).map((value) => JSON.stringify(value) ?? 'null'),
  fc.uint8Array({ maxLength: 20 }).map((bytes) => Buffer.from(bytes)),
);
const corruption = fc.array(fc.tuple(fc.constantFrom(...COLUMNS, 'status', 'headers', 'body', 'body_omitted'), sqliteValue), { minLength: 1, maxLength: 3 });

describe('fuzz: sqlite store records', FUZZ_TIMEOUT, () => {
  let db: Database.Database;
  let store: SqliteStore<Database.Database>;

  beforeAll(() => {
    db = new Database(':memory:');
    store = sqliteStore({ database: db, table: TABLE, configure: false });
    db.pragma('ignore_check_constraints = ON');
  });
  afterAll(() => {
    store?.close();
    db?.close();
  });

  /** Writes a completed record through the store, then overwrites columns; false when SQLite refused a value (NOT NULL). */
  async function corrupted(ref: RecordRef, changes: ReadonlyArray<readonly [string, unknown]>): Promise<boolean> {
    const claim = await store.claim(ref, 'fp', CLAIM_OPTIONS);
    if (claim.kind !== 'acquired') throw new Error(`expected acquired, got ${claim.kind}`);
    await store.complete(ref, claim.token, GOOD_RESPONSE);
    try {
      for (const [column, value] of changes) db.prepare(`UPDATE ${TABLE} SET ${column} = ? WHERE scope = ? AND key = ?`).run(value, ref.scope, ref.key);
    } catch (error) {
      if (/NOT NULL/.test(String(error))) return false;
      throw error;
    }
    return true;
  }

  const raw = (ref: RecordRef) => db.prepare(`SELECT * FROM ${TABLE} WHERE scope = ? AND key = ?`).get(ref.scope, ref.key) as Record<string, unknown>;
  const rowResponse = (row: Record<string, unknown>) =>
    expectedResponse(row.status, row.headers, row.body, row.body_omitted === 0 ? false : row.body_omitted === 1 ? true : 'corrupt');

  it('answers a corrupted record with the typed error or exactly what it holds, on claim and get', async () => {
    let corruptSeen = 0;
    await fuzzAsync(
      fc.asyncProperty(corruption, async (changes) => {
        const ref = { scope: 'fuzz', key: randomUUID() };
        if (!(await corrupted(ref, changes))) return;
        const row = raw(ref);

        const claim = await settle(() => store.claim(ref, 'fp', CLAIM_OPTIONS));
        if (claim instanceof CorruptRecordError) corruptSeen++;
        else if (claim.kind === 'completed') checkReplay(claim.response, rowResponse(row));
        else if (claim.kind === 'in_flight') expect(Number.isFinite(claim.retryAfterMs) && claim.retryAfterMs > 0).toBe(true);

        // A claim that took the record over rewrote it: read what is there now.
        const record = await settle(() => store.get(ref));
        if (record instanceof CorruptRecordError || record === undefined) return;
        expect(['in_flight', 'completed']).toContain(record.state);
        expect(typeof record.fingerprint).toBe('string');
        checkTimes(record.leaseUntil, record.expiresAt);
        // The times are what the row holds (NULL: unknown), or the record was refused above.
        const now = raw(ref);
        expect([record.createdAt, record.updatedAt]).toEqual([now.created_at ?? undefined, now.updated_at ?? undefined]);
        checkRecordTimes(record);
        if (record.state === 'completed') checkReplay(record.response!, rowResponse(now));
      }),
      0.3,
    );
    expect(corruptSeen).toBeGreaterThan(0);
  });
});

describe('fuzz regressions: sqlite store records', () => {
  let db: Database.Database;
  let store: SqliteStore<Database.Database>;
  beforeAll(() => {
    db = new Database(':memory:');
    store = sqliteStore({ database: db, table: `${TABLE}_r`, configure: false });
  });
  afterAll(() => db?.close());

  async function completedWith(set: string, value: unknown): Promise<RecordRef> {
    const ref = { scope: 'regression', key: randomUUID() };
    const claim = await store.claim(ref, 'fp', CLAIM_OPTIONS);
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    await store.complete(ref, claim.token, GOOD_RESPONSE);
    db.prepare(`UPDATE ${TABLE}_r SET ${set} = ? WHERE scope = ? AND key = ?`).run(value, ref.scope, ref.key);
    return ref;
  }

  // Found by the property above: the decoder cast columns without looking at them, so each of
  // these replayed (a body of 5 zero bytes from the integer 5, an empty body from text, status 0)
  // or threw a SyntaxError from JSON.parse instead of CorruptRecordError.
  it.each([
    ['body', 5, /body is not a blob/],
    ['body', 'text', /body is not a blob/],
    ['status', 0, /status/],
    ['status', 200.5, /status is not an integer/],
    ['headers', '{', /headers is not valid JSON/],
    ['headers', '[["a b","x"]]', /header name "a b"/],
    ['headers', '[["a","x\\ny"]]', /characters HTTP forbids/],
    ['body_omitted', 2, /body_omitted/],
    ['fingerprint', Buffer.from('fp'), /fingerprint is not text/],
    ['lease_until', 'soon', /lease_until is not an integer/],
    // A replay does not read the checkpoint: only get() does.
    ['recovery_data', '{not json', /recovery_data is not valid JSON/, 'get only'],
  ])('%s = %j is a CorruptRecordError on claim and get', async (column, value, reason, only?: string) => {
    const ref = await completedWith(column, value);
    const calls = [() => store.get(ref), ...(only ? [] : [() => store.claim(ref, 'fp', CLAIM_OPTIONS)])];
    for (const call of calls) {
      const error = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(CorruptRecordError);
      expect((error as Error).message).toMatch(reason);
    }
  });
});
