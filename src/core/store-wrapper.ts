/**
 * Wrappers that must stay outermost, whichever order the application wraps in.
 *
 * `instrumentStore` traces the store's methods, including `beginTransaction` and its transaction's;
 * an ORM bridge replaces `beginTransaction` with the ORM's own. Bridged over an instrumented store,
 * the bridge's transactions would pass the instrumentation by, and the spans of transactional mode
 * (begin, complete, commit) would silently go missing. So an outermost wrapper says what it wraps
 * and how to wrap again, and a bridge puts itself beneath it: either order gives the same store.
 */
import type { IdempotencyStore } from './store.js';

/** Where an outermost wrapper answers with its `OuterWrapper` (a registered symbol: two copies of idemkit agree). */
export const OUTER_WRAPPER: unique symbol = Symbol.for('idemkit.outerWrapper') as never;

export interface OuterWrapper {
  /** The store beneath the wrapper. */
  readonly inner: IdempotencyStore;
  /** The same wrapper, with the same settings, around another store. */
  rewrap<S extends IdempotencyStore>(store: S): S;
}

/** The store's outermost wrapper, if it has one. */
export function outerWrapperOf(store: IdempotencyStore): OuterWrapper | undefined {
  const wrapper = (store as { readonly [OUTER_WRAPPER]?: OuterWrapper })[OUTER_WRAPPER];
  return wrapper !== undefined && typeof wrapper.rewrap === 'function' ? wrapper : undefined;
}
