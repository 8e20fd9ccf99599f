/**
 * The DynamoDB store across processes: two processes × 50 concurrent claims of one key in one
 * table (dynalite, started here on a spare port) give one winner, and so does the race to take
 * the key over once its lease ended; 50 distinct keys claimed by both processes give 50 winners.
 */
import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { dynamodbStore } from '../../src/stores/dynamodb/index.js';
import type { Dynalite } from './dynamodb-support.js';
import { startDynalite, uniqueTable, withTtlApi } from './dynamodb-support.js';

let db: Dynalite;
const children: ChildProcess[] = [];
beforeAll(async () => {
  db = await startDynalite();
});
afterAll(async () => {
  for (const child of children) if (child.exitCode === null) process.kill(child.pid!, 'SIGKILL');
  await db.close();
});

it('gives one winner per key, and one take-over, across 2 processes × 50 concurrent claims on one table', async () => {
  const table = uniqueTable();
  // The processes' margin (the default): renew(…, 0) writes the lease's end that far back.
  const store = dynamodbStore({ client: withTtlApi(db.client()), table });
  await store.migrate();
  const script = join(import.meta.dirname, 'procs', 'dynamodb-claimer.ts');
  const spawned = Array.from({ length: 2 }, () =>
    fork(script, [db.endpoint, table, 'the-key', '50'], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
  );
  children.push(...spawned);
  const next = <T>(c: ChildProcess) => new Promise<T>((resolve) => c.once('message', resolve as (m: unknown) => void));
  // Barrier: both processes have their client before any claims.
  await Promise.all(spawned.map((c) => next(c)));
  const replies = spawned.map((c) => next<{ shared: number; distinct: number; inFlight: number }>(c));
  for (const c of spawned) c.send('go');
  const counts = await Promise.all(replies);
  expect(counts.reduce((n, c) => n + c.shared, 0)).toBe(1);
  expect(counts.reduce((n, c) => n + c.inFlight, 0)).toBe(99);
  expect(counts.reduce((n, c) => n + c.distinct, 0)).toBe(50);

  // End the winner's lease (as its crash would, once the lease ran out): 100 claims race to take it over.
  const record = await store.admin.inspect({ scope: 's', key: 'the-key' });
  expect(record?.state).toBe('in_flight');
  expect(await store.listAbandoned()).toEqual([]);
  expect(await store.admin.list({ scope: 's', state: 'in_flight', limit: 1000 })).toHaveLength(51);
  await endLease(store, table);
  const takeovers = spawned.map((c) => next<{ takeovers: number; won: number }>(c));
  for (const c of spawned) c.send('take-over');
  const taken = await Promise.all(takeovers);
  expect(taken.reduce((n, c) => n + c.takeovers, 0)).toBe(1);
  expect(taken.reduce((n, c) => n + c.won, 0)).toBe(1);
  expect((await store.admin.inspect({ scope: 's', key: 'the-key' }))?.attempt).toBe(2);
}, 120_000);

/** Ends the shared key's lease with the owner's own renew(…, 0): the token is read from the table. */
async function endLease(store: ReturnType<typeof dynamodbStore>, table: string): Promise<void> {
  const { GetItemCommand } = await import('@aws-sdk/client-dynamodb');
  const { partitionKey } = await import('../../src/stores/dynamodb/item.js');
  const { Item } = await db.client().send(new GetItemCommand({ TableName: table, Key: { pk: { S: partitionKey({ scope: 's', key: 'the-key' }) } }, ConsistentRead: true }));
  expect(await store.renew({ scope: 's', key: 'the-key' }, Item!.tok!.S!, 0)).toBe(true);
}
