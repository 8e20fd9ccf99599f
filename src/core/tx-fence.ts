import { TransactionEndedError } from './errors.js';

/** Whether the fenced handle may still be used, and what to say once it may not. */
export interface Fence {
  /** Undefined while the handle is usable; afterwards the reason it was closed. */
  readonly closedBecause: string | undefined;
}

const wrappedBy = new WeakMap<object, WeakMap<Fence, object>>();

/**
 * The handle a handler writes through (`ctx.tx`), refusing every call once its execution is over.
 *
 * The driver object behind it (a pooled pg client, a mysql2 connection, the one better-sqlite3
 * connection) outlives the transaction: once committed or rolled back it goes back to its pool or
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
  let byFence = wrappedBy.get(target);
  const existing = byFence?.get(fence);
  if (existing !== undefined) return existing;
  const check = () => {
    if (fence.closedBecause !== undefined) {
      throw new TransactionEndedError(`${label} was used after ${fence.closedBecause}; nothing was written (its transaction is over)`);
    }
  };
  const wrapResult = (value: unknown): unknown => (fenceable(value) ? fenced(value, fence, label) : value);
  const methods = new Map<PropertyKey, { raw: unknown; wrapped: unknown }>();
  const proxy = new Proxy(target, {
    get(object, property) {
      const value: unknown = Reflect.get(object, property, object);
      if (typeof value !== 'function' || property === 'constructor') return value;
      const known = methods.get(property);
      if (known !== undefined && known.raw === value) return known.wrapped;
      const method = value as (...args: unknown[]) => unknown;
      const wrapped = function (this: unknown, ...args: unknown[]): unknown {
        check();
        // Called through the handle, `this` is the proxy; the driver needs its own object.
        return wrapResult(Reflect.apply(method, this === proxy || this === undefined ? object : this, args));
      };
      methods.set(property, { raw: value, wrapped });
      return wrapped;
    },
    set(object, property, value) {
      return Reflect.set(object, property, value, object);
    },
    apply(fn, thisArg, args) {
      check();
      return wrapResult(Reflect.apply(fn as (...a: unknown[]) => unknown, thisArg, args));
    },
  });
  if (byFence === undefined) {
    byFence = new WeakMap();
    wrappedBy.set(target, byFence);
  }
  byFence.set(fence, proxy);
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
