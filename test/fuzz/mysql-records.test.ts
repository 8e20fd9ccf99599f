/**
 * Fuzzing the MySQL store's record decoder through the real store on the shared MariaDB: a
 * completed record is written by the store in a table of this run's own, then columns are
 * overwritten with arbitrary values of their types, through a session without strict mode (so an
 * unknown state is stored as '', as such a server would), then the record is claimed and read.
 * See record-check.ts for what is owed.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { createPool } from 'mysql2/promise';
import type { Pool, PoolConnection } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CorruptRecordError } from '../../src/core/errors.js';
import type { RecordRef } from '../../src/core/store.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import type { MysqlStore } from '../../src/stores/mysql/index.js';
import { MARIADB, requireService } from '../support/services.js';
import { anyUtf16, FUZZ_TIMEOUT, fuzzAsync } from './fuzz.js';
import { CLAIM_OPTIONS, checkCorrupted, completeGood, expectedResponse } from './record-check.js';

const up = await requireService(MARIADB);
const TABLE = `idemkit_fuzz_${randomUUID().replaceAll('-', '').slice(0, 10)}`;

const text = anyUtf16({ maxLength: 20 });
const headersJson = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }).map((value) => JSON.stringify(value) ?? 'null'),
  text,
  fc.constantFrom('[]', '[["a","b"]]', '[["a b","x"]]', '[["a","x\\ny"]]', '[["a"]]', '[["a",1]]', '{"content-type":"text/plain"}', '[["Content-Type","é"]]'),
);
const bigint = fc.oneof(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), fc.constantFrom(0n, 1n, BigInt(Date.now() + 3_600_000), BigInt(Date.now() - 3_600_000))).map(String);
/** [column, value] */
const change = fc.oneof(
  fc.tuple(fc.constant('state'), fc.constantFrom('in_flight', 'completed', 'other')),
  fc.tuple(fc.constant('fingerprint'), fc.oneof(text, fc.constant('fp'))),
  fc.tuple(fc.constantFrom('lease_until', 'expires_at'), bigint),
  fc.tuple(fc.constantFrom('created_at', 'updated_at'), fc.option(bigint, { nil: null })),
  fc.tuple(fc.constantFrom('revision', 'attempt'), fc.oneof(fc.nat(), fc.constant('18446744073709551615'))),
  fc.tuple(fc.constantFrom('recovery_point', 'recovery_data'), fc.option(fc.oneof(text, headersJson), { nil: null })),
  fc.tuple(fc.constant('status'), fc.option(fc.oneof(fc.integer({ min: 0, max: 65_535 }), fc.constantFrom(0, 99, 100, 200, 999, 1000)), { nil: null })),
  fc.tuple(fc.constant('headers'), fc.option(headersJson, { nil: null })),
  fc.tuple(fc.constant('body'), fc.option(fc.uint8Array({ maxLength: 20 }).map((b) => Buffer.from(b)), { nil: null })),
  fc.tuple(fc.constant('body_omitted'), fc.integer({ min: -128, max: 127 })),
);

describe.skipIf(!up)('fuzz: mysql store records', FUZZ_TIMEOUT, () => {
  let pool: Pool;
  let editor: PoolConnection;
  let store: MysqlStore;

  beforeAll(async () => {
    pool = createPool({ host: MARIADB.host, port: MARIADB.port, user: 'root', database: 'test', connectionLimit: 4 });
    store = mysqlStore({ pool, table: TABLE });
    await store.migrate();
    editor = await pool.getConnection();
    await editor.query(`SET SESSION sql_mode = ''`);
  });
  afterAll(async () => {
    if (!pool) return;
    editor?.release();
    await pool.query(`DROP TABLE IF EXISTS \`${TABLE}\``);
    await pool.end();
  });

  const held = async (ref: RecordRef) => {
    const [rows] = await pool.query(`SELECT status, headers, body, body_omitted FROM \`${TABLE}\` WHERE scope = ? AND idem_key = ?`, [ref.scope, ref.key]);
    const row = (rows as Array<Record<string, unknown>>)[0];
    if (!row) return 'invalid';
    const omitted = row.body_omitted === 0 ? false : row.body_omitted === 1 ? true : 'corrupt';
    return expectedResponse(row.status, row.headers === null ? null : String(row.headers), row.body, omitted);
  };
  const edit = async (ref: RecordRef, column: string, value: unknown) => {
    await editor.query(`UPDATE \`${TABLE}\` SET \`${column}\` = ? WHERE scope = ? AND idem_key = ?`, [value, ref.scope, ref.key]);
  };

  it('answers a corrupted record with the typed error or exactly what it holds, on claim and get', async () => {
    let refused = 0;
    await fuzzAsync(
      fc.asyncProperty(fc.array(change, { minLength: 1, maxLength: 3 }), async (changes) => {
        const ref = { scope: 'fuzz', key: randomUUID() };
        await completeGood(store, ref);
        for (const [column, value] of changes) await edit(ref, column, value);
        if (await checkCorrupted(store, ref, () => held(ref))) refused++;
      }),
      0.05,
    );
    expect(refused).toBeGreaterThan(0);
  });

  // Found by the property above: body_omitted 2 (or -1) was read as "not omitted". Found by
  // reading, as in the Redis store, and covered by the property: a header name or value Node's
  // setHeader throws on (ERR_INVALID_HTTP_TOKEN, ERR_INVALID_CHAR) was replayed.
  it.each([
    ['headers', '[["a b","x"]]', /header name "a b"/],
    ['headers', '[["a","x\\ny"]]', /characters HTTP forbids/],
    ['body_omitted', 2, /body_omitted 2 is neither 0 nor 1/],
  ])('regression: %s = %j is a CorruptRecordError on claim and get', async (column, value, reason) => {
    const ref = { scope: 'regression', key: randomUUID() };
    await completeGood(store, ref);
    await edit(ref, column, value);
    for (const call of [() => store.claim(ref, 'fp', CLAIM_OPTIONS), () => store.get(ref)]) {
      const error = await call().then(() => undefined, (e: unknown) => e);
      expect(error).toBeInstanceOf(CorruptRecordError);
      expect((error as Error).message).toMatch(reason);
    }
  });
});
