/**
 * The driver quirks idemkit handles in one place (src/drivers), checked without a server: each is
 * also exercised for real by the store and pattern suites.
 */
import { describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { errno, isDeadlock, isDuplicateKey, isFatal, inTransaction, mysqlValue } from '../../src/drivers/mysql.js';
import type { PostgresClient, PostgresQueryResult } from '../../src/drivers/postgres.js';
import { commit, commitRolledBack, holdClient, isMissingSchema } from '../../src/drivers/postgres.js';
import { evalScript, isNoScript, redisCaller, script } from '../../src/drivers/redis.js';
import { sqlExecutor } from '../../src/drivers/sql-executor.js';

/** A pg client whose every statement answers `answers[text]` (or an empty result). */
function pgClient(answers: Record<string, Partial<PostgresQueryResult>>) {
  const sent: string[] = [];
  const client = {
    async query(text: string): Promise<PostgresQueryResult> {
      sent.push(text);
      return { rows: [], rowCount: 0, command: text.split(' ')[0], ...answers[text] };
    },
  };
  return { client, sent };
}

describe('PostgreSQL: COMMIT answered with ROLLBACK', () => {
  it('is told from a COMMIT that committed', () => {
    expect(commitRolledBack({ rows: [], rowCount: null, command: 'ROLLBACK' })).toBe(true);
    expect(commitRolledBack({ rows: [], rowCount: null, command: 'COMMIT' })).toBe(false);
    expect(commitRolledBack({ rows: [], rowCount: null })).toBe(false);
  });

  it('is one typed error, with a code, for every caller', async () => {
    const { client } = pgClient({ COMMIT: { command: 'ROLLBACK' } });
    const error = await commit(client, 'test').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error).toMatchObject({ code: 'ERR_IDEMKIT_STORE_UNAVAILABLE', message: 'test: the transaction had failed, so COMMIT rolled it back' });
    await expect(commit(pgClient({}).client, 'test')).resolves.toBeUndefined();
  });

  it('makes sqlExecutor().transaction reject with that error, not resolve', async () => {
    const { client, sent } = pgClient({ COMMIT: { command: 'ROLLBACK' } });
    const executor = sqlExecutor(client);
    await expect(executor.transaction(async () => 'done')).rejects.toThrow(StoreUnavailableError);
    expect(sent).toEqual(['BEGIN', 'COMMIT']);
  });

  it('recognises the missing schema by SQLSTATE', () => {
    expect(isMissingSchema({ code: '42P01' })).toBe(true);
    expect(isMissingSchema({ code: '42883' })).toBe(true);
    expect(isMissingSchema({ code: '40001' })).toBe(false);
    expect(isMissingSchema(new Error('42P01'))).toBe(false);
  });

  it('holds a checked-out client: its connection error is kept, and it is released once, discarded', () => {
    const listeners: Array<(error: Error) => void> = [];
    const released: unknown[] = [];
    const client: PostgresClient = {
      query: async () => ({ rows: [], rowCount: 0 }),
      release: (error) => released.push(error),
      on: (_event, listener) => listeners.push(listener),
      removeListener: (_event, listener) => listeners.splice(listeners.indexOf(listener), 1),
    };
    const held = holdClient(client);
    const lost = new Error('connection terminated');
    listeners[0]!(lost);
    held.release();
    held.release();
    expect(released).toEqual([lost]);
    expect(listeners).toHaveLength(0);
    expect(held.released).toBe(true);
  });
});

describe('Redis: NOSCRIPT', () => {
  const noscript = Object.assign(new Error('NOSCRIPT No matching script. Please use EVAL.'), { name: 'ReplyError' });

  it('is the NOSCRIPT error code, not the word anywhere in a message', () => {
    expect(isNoScript(noscript)).toBe(true);
    expect(isNoScript('NOSCRIPT No matching script.')).toBe(true);
    expect(isNoScript(new Error('ERR Error running script: NOSCRIPT is a word here'))).toBe(false);
    expect(isNoScript(new Error('noscript'))).toBe(false);
    expect(isNoScript(new Error('NOSCRIPTS'))).toBe(false);
    expect(isNoScript(undefined)).toBe(false);
  });

  it('sends EVALSHA, and EVAL once when the server does not have the script', async () => {
    const s = script('return 1');
    const sent: string[] = [];
    const reply = await evalScript(s, async (command, body) => {
      sent.push(`${command} ${body}`);
      if (command === 'evalsha') throw noscript;
      return 'ran';
    });
    expect(reply).toBe('ran');
    expect(sent).toEqual([`evalsha ${s.sha}`, 'eval return 1']);
  });

  it('does not retry any other error', async () => {
    let calls = 0;
    const failing = evalScript(script('return 1'), async () => {
      calls++;
      throw new Error('BUSY Redis is busy running a script');
    });
    await expect(failing).rejects.toThrow(/BUSY/);
    expect(calls).toBe(1);
  });

  it('adapts a node-redis client (sendCommand) to the one command call', async () => {
    const sent: string[][] = [];
    const caller = redisCaller({ sendCommand: async (args: string[]) => (sent.push(args), 'OK') });
    await caller.call('SET', 'k', 1);
    expect(sent).toEqual([['SET', 'k', '1']]);
    expect(() => redisCaller({})).toThrow(/`redis`/);
  });
});

describe('MySQL / MariaDB error classification', () => {
  it('tells duplicate keys, deadlocks and broken connections apart', () => {
    expect(isDuplicateKey({ errno: 1062 })).toBe(true);
    expect(isDuplicateKey({ code: 'ER_DUP_ENTRY' })).toBe(true);
    expect(isDuplicateKey({ errno: 1213 })).toBe(false);
    expect(isDeadlock({ errno: 1213 })).toBe(true);
    expect(isDeadlock({ errno: 1062 })).toBe(false);
    expect(isFatal({ fatal: true })).toBe(true);
    expect(isFatal({ fatal: 'yes' })).toBe(false);
    expect(errno(null)).toBeUndefined();
  });

  it('reads the in-transaction bit of an OK packet', () => {
    expect(inTransaction({ serverStatus: 3 })).toBe(true);
    expect(inTransaction({ serverStatus: 2 })).toBe(false);
    expect(inTransaction([])).toBeUndefined();
  });

  it('binds what mysql2 refuses as it can take it', () => {
    expect([undefined, true, false, 'x', 2].map(mysqlValue)).toEqual([null, 1, 0, 'x', 2]);
  });
});
