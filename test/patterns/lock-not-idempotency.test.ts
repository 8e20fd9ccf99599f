/**
 * The seed's late-retry case, executable: request A takes the lock, does the work, releases; a
 * late retry B then takes the lock too. With the lock alone the work runs twice; paired with a
 * state check (transition) it runs once.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisLock } from '../../src/patterns/lock.js';
import type { SqlExecutor } from '../../src/patterns/sql.js';
import { stateMachine, transition } from '../../src/patterns/state-machine.js';
import { REDIS, requireService } from '../support/services.js';
import { sqliteDatabase } from '../support/databases.js';
import type { TestDatabase } from '../support/databases.js';

const available = await requireService(REDIS);
const PREFIX = `idemkit:test:late:${process.pid}:${randomBytes(4).toString('hex')}:`;
const machine = stateMachine({ PENDING: ['PAID'], PAID: [] });

describe.skipIf(!available)('a lock is not idempotency', () => {
  let redis: Redis;
  let t: TestDatabase;
  beforeAll(async () => {
    redis = new Redis({ host: REDIS.host, port: REDIS.port });
    t = sqliteDatabase();
    await t.db.query("CREATE TABLE payment_order (out_trade_no TEXT PRIMARY KEY, status TEXT NOT NULL DEFAULT 'PENDING')");
  });
  afterAll(async () => {
    const keys = await redis.keys(`${PREFIX}*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
    await t.close();
  });

  const locks = () => redisLock(redis, { prefix: PREFIX });

  /** The seed's handler: lock, pay, release. */
  async function lockOnly(orderNo: string, charges: string[]) {
    const lease = await locks().acquire(`pay:${orderNo}`, 10_000);
    if (!lease) return 'busy';
    try {
      charges.push(orderNo);
      return 'paid';
    } finally {
      await lease.release();
    }
  }

  /** The same, paired with a state check: the conditional transition decides, the lock only serialises. */
  async function lockAndState(db: SqlExecutor, orderNo: string, charges: string[]) {
    const lease = await locks().acquire(`pay:${orderNo}`, 10_000);
    if (!lease) return 'busy';
    try {
      return await db.transaction(async (tx) => {
        const moved = await transition(tx, { table: 'payment_order', where: { out_trade_no: orderNo }, to: 'PAID', machine });
        if (!moved.changed) return moved.current === 'PAID' ? 'already paid' : 'not payable';
        charges.push(orderNo); // the effect, committed with the state change
        return 'paid';
      });
    } finally {
      await lease.release();
    }
  }

  it('with the lock alone, a late retry pays again', async () => {
    const charges: string[] = [];
    expect(await lockOnly('SO-1', charges)).toBe('paid');
    expect(await lockOnly('SO-1', charges)).toBe('paid'); // the late retry
    expect(charges).toEqual(['SO-1', 'SO-1']);
  });

  it('paired with transition, the late retry finds the order paid', async () => {
    await t.db.query('INSERT INTO payment_order (out_trade_no) VALUES (?)', ['SO-2']);
    const charges: string[] = [];
    expect(await lockAndState(t.db, 'SO-2', charges)).toBe('paid');
    expect(await lockAndState(t.db, 'SO-2', charges)).toBe('already paid');
    // Concurrent duplicates: busy (lock) or already paid (state), never a second charge.
    const many = await Promise.all(Array.from({ length: 20 }, () => lockAndState(t.db, 'SO-2', charges)));
    expect(many.every((r) => r === 'busy' || r === 'already paid')).toBe(true);
    expect(charges).toEqual(['SO-2']);
  });
});
