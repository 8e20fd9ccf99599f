/**
 * Issue 26 item 2: the `ctx.tx` fence, as pure logic over a fake driver (the real drivers and ORMs:
 * test/core/tx-fence-drivers.test.ts, test/orm/transactions.test.ts). What the fence must refuse
 * once closed: calls, lazy queries (thenables whose `then` starts them) awaited afterwards, and
 * driver objects reached through a property. What it must leave alone: a native Promise a call
 * made while open returned (its statement already ran in the transaction), and rows.
 */
import { describe, expect, it } from 'vitest';
import { TransactionEndedError } from '../../src/core/errors.js';
import { fenceHandle } from '../../src/core/tx-fence.js';

/** What ran on the fake connection, in order. */
type Log = string[];

/** A lazy query, like Drizzle's QueryPromise or a Knex builder: nothing runs until `then`. */
class LazyQuery {
  constructor(
    private readonly log: Log,
    private readonly sql: string,
  ) {}
  where(condition: string): this {
    this.log.push(`built where ${condition}`);
    return this;
  }
  then<T>(onFulfilled?: (rows: { sql: string }[]) => T, onRejected?: (error: unknown) => T): Promise<T> {
    this.log.push(`ran ${this.sql}`);
    return Promise.resolve([{ sql: this.sql }]).then(onFulfilled, onRejected);
  }
}

/** A connection object a property leads to, like mysql2's `connection.connection`. */
class Wire {
  constructor(private readonly log: Log) {}
  query(sql: string): void {
    this.log.push(`wire ${sql}`);
  }
}

class FakeDriver {
  readonly log: Log = [];
  readonly wire = new Wire(this.log);
  readonly row = { id: 1 };
  readonly created = new Date(0);
  readonly options = { host: 'h' };
  insert(sql: string): LazyQuery {
    return new LazyQuery(this.log, sql);
  }
  /** Runs now: the Promise is its result, as pg's or mysql2's `query`. */
  query(sql: string): Promise<{ rows: { sql: string }[] }> {
    this.log.push(`ran ${sql}`);
    return Promise.resolve({ rows: [{ sql }] });
  }
  first(): { id: number } {
    return this.row;
  }
  many(): { id: number }[] {
    return [this.row];
  }
  bytes(): Uint8Array {
    return new Uint8Array([1]);
  }
  /** A plain-object thenable, like a Prisma request. */
  request(sql: string): PromiseLike<number> {
    const log = this.log;
    return {
      then(onFulfilled, onRejected) {
        log.push(`ran ${sql}`);
        return Promise.resolve(1).then(onFulfilled, onRejected);
      },
    };
  }
}

function opened() {
  const driver = new FakeDriver();
  const fence: { closedBecause: string | undefined } = { closedBecause: undefined };
  const tx = fenceHandle(driver, fence, 'ctx.tx');
  return { driver, tx, close: () => (fence.closedBecause = 'its request ended') };
}

describe('the ctx.tx fence', () => {
  it('checks a lazy query when it is awaited: built while open and awaited after, it never runs', async () => {
    const { driver, tx, close } = opened();
    const late = tx.insert('INSERT late').where('a');
    const lateRequest = tx.request('INSERT late request');
    close();
    await expect(late).rejects.toBeInstanceOf(TransactionEndedError);
    await expect(lateRequest).rejects.toThrow(/ctx\.tx was used after its request ended; nothing was written/);
    expect(() => late.where('b')).toThrow(TransactionEndedError);
    expect(driver.log).toEqual(['built where a']);
  });

  it('runs a lazy query awaited while open, and a chained call is the same query', async () => {
    const { driver, tx } = opened();
    const query = tx.insert('INSERT now');
    expect(query.where('a')).toBe(query);
    expect(await query).toEqual([{ sql: 'INSERT now' }]);
    expect(await tx.request('INSERT request')).toBe(1);
    expect(driver.log).toEqual(['built where a', 'ran INSERT now', 'ran INSERT request']);
  });

  it('hands back a native Promise as it is: started while open, it resolves after the fence closed', async () => {
    const { driver, tx, close } = opened();
    const pending = tx.query('SELECT 1');
    expect(Object.getPrototypeOf(pending)).toBe(Promise.prototype);
    close();
    expect(await pending).toEqual({ rows: [{ sql: 'SELECT 1' }] });
    expect(() => tx.query('SELECT 2')).toThrow(TransactionEndedError);
    expect(driver.log).toEqual(['ran SELECT 1']);
  });

  it('fences a driver object reached through a property: usable while open, refused after', () => {
    const { driver, tx, close } = opened();
    const wire = tx.wire;
    expect(tx.wire).toBe(wire);
    expect(wire).toBeInstanceOf(Wire);
    wire.query('INSERT during');
    close();
    expect(() => wire.query('INSERT after')).toThrow(TransactionEndedError);
    expect(() => tx.wire.query('INSERT after')).toThrow(TransactionEndedError);
    expect(driver.log).toEqual(['wire INSERT during']);
  });

  it('fences a driver object under a plain object in a property (Drizzle’s tx._.session), and leaves plain data objects alone', () => {
    const driver = new FakeDriver();
    const internals = { session: new Wire(driver.log), schema: { tables: 1 } };
    Object.assign(driver, { _: internals });
    const fence: { closedBecause: string | undefined } = { closedBecause: undefined };
    const tx = fenceHandle(driver as FakeDriver & { _: typeof internals }, fence, 'ctx.tx');
    const session = tx._.session;
    session.query('INSERT during');
    expect(tx._.schema).toBe(internals.schema);
    fence.closedBecause = 'its answer';
    expect(() => session.query('INSERT after')).toThrow(TransactionEndedError);
    expect(() => tx._.session.query('INSERT after')).toThrow(TransactionEndedError);
    expect(driver.log).toEqual(['wire INSERT during']);
    expect(tx.options).toBe(driver.options);
  });

  it('leaves rows, bytes, dates and plain option objects as they are (the same objects)', () => {
    const { driver, tx, close } = opened();
    expect(tx.first()).toBe(driver.row);
    expect(tx.many()[0]).toBe(driver.row);
    expect(tx.row).toBe(driver.row);
    expect(tx.created).toBe(driver.created);
    expect(tx.options).toBe(driver.options);
    expect(tx.bytes()).toBeInstanceOf(Uint8Array);
    close();
    // Reading data is not a statement: still readable after.
    expect(tx.row).toEqual({ id: 1 });
  });

  it('reports a frozen property as it is (a Proxy must), rather than failing on it', () => {
    const driver = new FakeDriver();
    const wire = new Wire(driver.log);
    Object.defineProperty(driver, 'frozenWire', { value: wire, writable: false, configurable: false, enumerable: true });
    const tx = fenceHandle(driver as FakeDriver & { frozenWire: Wire }, { closedBecause: undefined }, 'ctx.tx');
    expect(tx.frozenWire).toBe(wire);
  });
});
