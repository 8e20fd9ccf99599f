// A lease that never outlives its invocation: Lambda stops a function at its timeout without
// running anything more, so an invocation that timed out never renews, completes or releases.
// Left at `leaseMs` (30 s by default) its claim would hold the key that long past the timeout,
// and every retry meanwhile would get 409. Capped at the time the invocation has left plus a
// margin, the retry that follows a timeout takes the key over within the margin.
import { AsyncLocalStorage } from 'node:async_hooks';
import { InvalidOptionError } from '../core/errors.js';
import type { Claim, ClaimOptions, IdempotencyStore, RecordRef } from '../core/store.js';
import type { LambdaContext } from './events.js';

/**
 * How long a lease may run past the invocation's end, for the store's round trip and a renewal
 * in flight at the end: long enough that a live invocation is never taken over, short enough that
 * a retry of one that timed out waits little more than a second.
 */
export const DEFAULT_LEASE_MARGIN_MS = 1_000;

/** The invocation a claim is made in: its context, and the tokens claimed under it. */
interface Invocation {
  readonly context: LambdaContext;
  readonly tokens: string[];
}

/**
 * Caps every lease the wrapped store is asked for by the remaining time of the invocation that
 * claimed it. A claim learns its invocation from the async context `decide` runs in; a renewal
 * (from the engine's lease keeper, outside any invocation's context) by its owner token.
 */
export class InvocationLeases {
  private readonly current = new AsyncLocalStorage<Invocation>();
  private readonly byToken = new Map<string, LambdaContext>();
  readonly marginMs: number;

  constructor(marginMs: unknown, where: string) {
    const margin = marginMs ?? DEFAULT_LEASE_MARGIN_MS;
    if (typeof margin !== 'number' || !Number.isFinite(margin) || margin < 0) {
      throw new InvalidOptionError(`${where}.leaseMarginMs`, 'expected a finite number of ms, 0 or more');
    }
    this.marginMs = margin;
  }

  /** Runs `decide` as `context`'s invocation; `end` forgets its claims once it has answered. */
  run<T>(context: LambdaContext | undefined, decide: () => T): { readonly result: T; readonly invocation: Invocation | undefined } {
    // Without a context that tells the time left (a local test, a container), the lease is the engine's.
    if (typeof context?.getRemainingTimeInMillis !== 'function') return { result: decide(), invocation: undefined };
    const invocation: Invocation = { context, tokens: [] };
    return { result: this.current.run(invocation, decide), invocation };
  }

  end(invocation: Invocation | undefined): void {
    if (invocation === undefined) return;
    for (const token of invocation.tokens) this.byToken.delete(token);
  }

  /** The lease to ask for: `leaseMs`, or less when the invocation ends sooner. */
  private capped(leaseMs: number, context: LambdaContext | undefined): number {
    if (context === undefined) return leaseMs;
    const left = Math.max(0, Math.floor(context.getRemainingTimeInMillis()));
    return Math.min(leaseMs, left + this.marginMs);
  }

  /** `store` with its claims and renewals capped; every other member is the store's own. */
  wrap<Store extends IdempotencyStore>(store: Store): Store {
    const claim = async (ref: RecordRef, fingerprint: string, options: ClaimOptions): Promise<Claim> => {
      const invocation = this.current.getStore();
      const leaseMs = this.capped(options.leaseMs, invocation?.context);
      const claimed = await store.claim(ref, fingerprint, leaseMs === options.leaseMs ? options : Object.assign({}, options, { leaseMs }));
      if (invocation !== undefined && claimed.kind === 'acquired') {
        invocation.tokens.push(claimed.token);
        this.byToken.set(claimed.token, invocation.context);
      }
      return claimed;
    };
    const renew = (ref: RecordRef, token: string, leaseMs: number): Promise<boolean> => store.renew(ref, token, this.capped(leaseMs, this.byToken.get(token)));
    const bound = new Map<PropertyKey, { readonly of: unknown; readonly method: unknown }>();
    return new Proxy(store, {
      get(target, property) {
        if (property === 'claim') return claim;
        if (property === 'renew') return renew;
        const value: unknown = Reflect.get(target, property, target);
        if (typeof value !== 'function') return value;
        // Bound to the store itself: its methods may use private fields, which a proxy lacks.
        const known = bound.get(property);
        if (known?.of === value) return known.method;
        const method = (value as (...args: unknown[]) => unknown).bind(target);
        bound.set(property, { of: value, method });
        return method;
      },
    });
  }
}
