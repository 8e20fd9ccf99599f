import { TransactionEndedError } from './errors.js';

/** Whether the fenced handle may still be used, and what to say once it may not. */
export interface Fence {
  /** Undefined while the handle is usable; afterwards the reason it was closed. */
  readonly closedBecause: string | undefined;
}

/**
 * The handle a handler writes through (`ctx.tx`), refusing every call once its execution is over.
 *
 * The driver object behind it (a pooled pg client, a mysql2 connection, the sqlite store's own
 * better-sqlite3 connection) outlives the transaction: once committed or rolled back it goes back to its pool or
 * serves other requests. A handler that kept `ctx.tx` and wrote later (after its answer, or past
 * `maxExecutionMs`) would commit outside any idempotency transaction, or inside another request's.
 * So every method called through the handle checks the fence first and throws
 * `TransactionEndedError` once it is closed. What the handle leads to that can write on the same
 * connection is fenced too: objects a call hands back (a better-sqlite3 Statement, a prepared
 * transaction function, a query builder), driver objects read from a property
 * (`ctx.tx.connection`, Drizzle's `tx.session`), and lazy queries: a thenable a call hands back
 * (a Drizzle query, a Knex builder, a Prisma request) starts its query when awaited, so its `then`
 * checks the fence. A plain object in a property that holds a driver object or a function
 * (Drizzle's `tx._`, whose `session.client` is the connection) is fenced too; one that holds only
 * data (options, a row) is handed back as it is. A native Promise is handed back as it is: its call already ran, inside the
 * transaction. Methods run with the driver object itself as `this` (native methods refuse a Proxy receiver).
 */
export function fenceHandle<T>(target: T, fence: Fence, label: string): T {
  if ((typeof target !== 'object' && typeof target !== 'function') || target === null) return target;
  return fenced(target as object, fence, label) as T;
}

function fenced(target: object, fence: Fence, label: string): object {
  // Wrapped methods and driver objects, made on first use: most handles (a Statement) see one or two.
  let members: Map<PropertyKey, { raw: unknown; wrapped: unknown }> | undefined;
  const call = (fn: (...a: unknown[]) => unknown, self: unknown, args: unknown[]): unknown => {
    if (fence.closedBecause !== undefined) {
      throw new TransactionEndedError(`${label} was used after ${fence.closedBecause}; nothing was written (its transaction is over)`);
    }
    const result = Reflect.apply(fn, self, args);
    // A chained call (`statement.pluck()`, a builder's `.where()`) hands back the same object: the same handle.
    if (result === target) return proxy;
    return typeof result === 'function' || driverObject(result) ? fenced(result, fence, label) : result;
  };
  const proxy: object = new Proxy(target, {
    get(object, property) {
      const value: unknown = Reflect.get(object, property, object);
      if (typeof value === 'function') {
        if (property === 'constructor') return value;
      } else if (!driverObject(value) && !holdsDriver(value)) {
        return value;
      }
      const known = members?.get(property);
      if (known !== undefined && known.raw === value) return known.wrapped;
      // A proxy must report a frozen own property as it is.
      const own = Reflect.getOwnPropertyDescriptor(object, property);
      if (own?.configurable === false && own.writable === false) return value;
      let wrapped: unknown;
      if (typeof value === 'function') {
        const method = value as (...args: unknown[]) => unknown;
        // Called through the handle, `this` is the proxy; the driver needs its own object.
        wrapped = function (this: unknown, ...args: unknown[]): unknown {
          return call(method, this === proxy || this === undefined ? object : this, args);
        };
      } else {
        wrapped = value === target ? proxy : fenced(value, fence, label);
      }
      (members ??= new Map()).set(property, { raw: value, wrapped });
      return wrapped;
    },
    set(object, property, value) {
      return Reflect.set(object, property, value, object);
    },
    apply(fn, thisArg, args) {
      return call(fn as (...a: unknown[]) => unknown, thisArg, args);
    },
  });
  return proxy;
}

/**
 * An object that can itself run statements on the connection, as a call hands it back or a
 * property holds it: an instance of a class (a Statement, an iterator, a query builder, a
 * connection), or a thenable that is not a native Promise (a lazy query: Drizzle's, Knex's and
 * Prisma's start when awaited). Native Promises (their call already ran), rows (plain objects and
 * arrays), bytes, dates and primitives are handed back as they are. (Functions are fenced too.)
 */
function driverObject(value: unknown): value is object {
  if (typeof value !== 'object' || value === null) return false;
  if (typeof (value as { then?: unknown }).then === 'function') return !(value instanceof Promise);
  const proto = Object.getPrototypeOf(value) as object | null;
  if (proto === null || proto === Object.prototype || proto === Array.prototype) return false;
  return !(ArrayBuffer.isView(value) || value instanceof ArrayBuffer || value instanceof Date || value instanceof RegExp || value instanceof Error);
}

/** A plain object (a property's, not a call's result) one of whose own values can run statements: Drizzle's `tx._`. */
function holdsDriver(value: unknown): value is object {
  if (typeof value !== 'object' || value === null) return false;
  const proto = Object.getPrototypeOf(value) as object | null;
  if (proto !== Object.prototype && proto !== null) return false;
  for (const inner of Object.values(value)) if (typeof inner === 'function' || driverObject(inner)) return true;
  return false;
}
