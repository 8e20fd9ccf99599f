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
 * `TransactionEndedError` once it is closed; objects the driver hands back that can write on the
 * same connection (a better-sqlite3 Statement, a prepared transaction function) are fenced too.
 * Methods run with the driver object itself as `this` (native methods refuse a Proxy receiver).
 */
export function fenceHandle<T>(target: T, fence: Fence, label: string): T {
  if ((typeof target !== 'object' && typeof target !== 'function') || target === null) return target;
  return fenced(target as object, fence, label) as T;
}

function fenced(target: object, fence: Fence, label: string): object {
  // Wrapped methods, made on first use: most handles (a Statement) see one or two methods.
  let methods: Map<PropertyKey, { raw: unknown; wrapped: unknown }> | undefined;
  const call = (fn: (...a: unknown[]) => unknown, self: unknown, args: unknown[]): unknown => {
    if (fence.closedBecause !== undefined) {
      throw new TransactionEndedError(`${label} was used after ${fence.closedBecause}; nothing was written (its transaction is over)`);
    }
    const result = Reflect.apply(fn, self, args);
    // A chained call (`statement.pluck()`) hands back the same object: the same handle.
    if (result === target) return proxy;
    return fenceable(result) ? fenced(result, fence, label) : result;
  };
  const proxy: object = new Proxy(target, {
    get(object, property) {
      const value: unknown = Reflect.get(object, property, object);
      if (typeof value !== 'function' || property === 'constructor') return value;
      const known = methods?.get(property);
      if (known !== undefined && known.raw === value) return known.wrapped;
      const method = value as (...args: unknown[]) => unknown;
      // Called through the handle, `this` is the proxy; the driver needs its own object.
      const wrapped = function (this: unknown, ...args: unknown[]): unknown {
        return call(method, this === proxy || this === undefined ? object : this, args);
      };
      (methods ??= new Map()).set(property, { raw: value, wrapped });
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
 * A value a driver call returned that can itself run statements on the connection: a function, or
 * an instance of a class (a Statement, an iterator). Promises, rows (plain objects and arrays),
 * bytes and primitives are handed back as they are.
 */
function fenceable(value: unknown): value is object {
  if (typeof value === 'function') return true;
  if (typeof value !== 'object' || value === null) return false;
  if (typeof (value as { then?: unknown }).then === 'function') return false;
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return false;
  const proto = Object.getPrototypeOf(value) as object | null;
  return proto !== null && proto !== Object.prototype && proto !== Array.prototype;
}
