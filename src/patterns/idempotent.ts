/**
 * `idempotent(fn, options)`: any async function, once per key — for jobs, cron tasks, RPC
 * handlers, internal calls. The call goes through the same engine as an HTTP request (one atomic
 * claim, lease renewal, completion fenced by the owner token, every store), with the key, scope
 * and fingerprint taken from the arguments and the result kept as JSON.
 */
import { IdempotencyEngine } from '../core/engine.js';
import type { RequestReader } from '../core/engine.js';
import { InvalidOptionError } from '../core/errors.js';
import type { IdempotencyEvents } from '../core/events.js';
import type { IdempotencyLogger } from '../core/logger.js';
import { optionReader } from '../core/option-reader.js';
import type { IdempotencyStore } from '../core/store.js';
import { ResultNotKeptError } from './errors.js';

export interface IdempotentOptions<Args extends readonly unknown[]> {
  /** Where records live: any store. Required. */
  readonly store: IdempotencyStore;
  /**
   * The idempotency key of a call, from its arguments: printable ASCII, at most 255 characters
   * (an `InvalidKeyError` otherwise). Required.
   */
  readonly key: (...args: Args) => string;
  /** The tenant (records of two scopes never meet), fixed or from the arguments. @default '' */
  readonly scope?: string | ((...args: Args) => string);
  /**
   * What must be the same for a repeat to be "the same call": a JSON value from the arguments.
   * A repeat with the key and another fingerprint throws `KeyMismatchError`.
   * @default the arguments themselves
   */
  readonly fingerprint?: (...args: Args) => unknown;
  /**
   * The function's name in its records' fingerprint, so two functions that use the same key
   * mismatch instead of replaying each other's result.
   * @default fn.name (required when fn has none)
   */
  readonly name?: string;
  /**
   * What a call does while another call with its key runs: `'conflict'` throws `KeyInFlightError`
   * (its `retryAfterMs` says when to try again), `'wait'` waits for that call's result (up to
   * `waitTimeoutMs`, then the conflict).
   * @default 'conflict'
   */
  readonly inFlight?: 'conflict' | 'wait';
  /** @default 10_000 */
  readonly waitTimeoutMs?: number;
  /** How long a claim is trusted before another call may take over; renewed while fn runs. @default 30_000 */
  readonly leaseMs?: number;
  /** How long a key is remembered. @default 86_400_000 (24 h) */
  readonly windowMs?: number;
  /** @default Infinity */
  readonly maxExecutionMs?: number;
  /** @default 3_000 */
  readonly storeTimeoutMs?: number;
  readonly onError?: (error: unknown) => void;
  readonly logger?: IdempotencyLogger;
  readonly events?: IdempotencyEvents;
  readonly redactKeys?: boolean;
}

/** The call as the engine reads it: the arguments, and the fingerprint's JSON. */
interface Call<Args> {
  readonly args: Args;
  readonly key: string;
  readonly body: Uint8Array;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const JSON_HEADERS: ReadonlyArray<readonly [string, string]> = [['content-type', 'application/json']];
/** Stored results are 200s; a result that could not be kept is a 500 whose body says why. */
const KEPT = 200;
const NOT_KEPT = 500;

/**
 * Wraps `fn` so that calls with one key run it once: the first runs it and stores its result; a
 * repeat returns that result (parsed from its JSON); a call while the first runs throws
 * `KeyInFlightError` or waits (`inFlight`); a repeat with other arguments throws
 * `KeyMismatchError`. When fn throws, nothing is stored and the key is free again: throw only when
 * nothing happened, and return a value that says so when something did.
 */
// `Fn` is inferred from `fn` alone: `options` is typed from it (a `key: () => 'k'` must not
// narrow the arguments to none).
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any function; its own types come through.
export function idempotent<Fn extends (...args: any[]) => unknown>(
  fn: Fn,
  options: IdempotentOptions<Parameters<Fn>>,
): (...args: Parameters<Fn>) => Promise<Awaited<ReturnType<Fn>>> {
  type Args = Parameters<Fn>;
  type Result = ReturnType<Fn>;
  if (typeof fn !== 'function') throw new InvalidOptionError('fn', 'idempotent(fn, options): expected a function');
  const read = optionReader('idempotent()', options);
  const keyOf = read.function('key', { required: true, expected: 'a function (...args) => key' });
  const fingerprintOf = read.function('fingerprint', { default: (...args: Args) => args as unknown });
  const scopeOption = read.value('scope');
  if (scopeOption !== undefined && typeof scopeOption !== 'string' && typeof scopeOption !== 'function') {
    read.fail('scope', 'expected a string or a function (...args) => scope');
  }
  const name = read.value('name') ?? fn.name;
  if (typeof name !== 'string' || name === '') read.fail('name', `the function has no name: give one (it separates this function's records from others')`);
  const { store, inFlight, waitTimeoutMs, leaseMs, windowMs, maxExecutionMs, storeTimeoutMs, onError, logger, events, redactKeys } = options;
  // The engine checks these (and refuses unknown ones); this reader only takes its own.
  for (const shared of ['store', 'inFlight', 'waitTimeoutMs', 'leaseMs', 'windowMs', 'maxExecutionMs', 'storeTimeoutMs', 'onError', 'logger', 'events', 'redactKeys'] as const) {
    read.value(shared);
  }
  read.done();

  const scope = (call: Call<Args>) => (typeof scopeOption === 'function' ? scopeOption(...call.args) : (scopeOption ?? ''));
  const engine = new IdempotencyEngine<Call<Args>>(
    { store, inFlight, waitTimeoutMs, leaseMs, windowMs, maxExecutionMs, storeTimeoutMs, onError, logger, events, redactKeys, scope, methods: ['POST'] },
    { suffix: ' of idempotent()' },
  );
  const path = `/${encodeURIComponent(name)}`;
  const reader: RequestReader<Call<Args>> = {
    method: () => 'POST',
    header: (call) => call.key,
    path: () => path,
    contentType: () => 'application/json',
    readBody: (call, limit) => {
      if (call.body.byteLength > limit) throw new InvalidOptionError('fingerprint', `the call's fingerprint is ${call.body.byteLength} bytes of JSON, over ${limit}`);
      return { body: call.body };
    },
  };

  return async function idempotentCall(...args: Args): Promise<Awaited<Result>> {
    const key = keyOf(...args);
    if (typeof key !== 'string') throw new InvalidOptionError('key', `expected the key function to return a string, got ${typeof key}`);
    const call: Call<Args> = { args, key: quotedKey(key), body: fingerprintJson(fingerprintOf(...args)) };
    const decision = await engine.decide(call, reader);
    switch (decision.kind) {
      case 'pass':
        return (await fn(...args)) as Awaited<Result>;
      case 'reject':
        throw decision.error;
      case 'replay':
        return storedResult(decision.response.status, decision.response.body, decision.response.bodyOmitted);
      case 'execute': {
        const { execution } = decision;
        let result: Awaited<Result>;
        try {
          result = (await fn(...args)) as Awaited<Result>;
        } catch (error) {
          // Thrown: nothing is stored and the key is free (the same rule as `ctx.discard()`).
          execution.context.discard();
          await execution.finish(NOT_KEPT, JSON_HEADERS, new Uint8Array(), true);
          throw error;
        }
        let json: string | undefined;
        try {
          json = JSON.stringify({ value: result });
        } catch (error) {
          // The call ran: keep that fact, so a retry does not run it again, and say why there is no result.
          const reason = `its result is not JSON (${(error as Error).message})`;
          finishOrThrow(await execution.finish(NOT_KEPT, JSON_HEADERS, encoder.encode(JSON.stringify({ notKept: reason }))));
          throw new ResultNotKeptError(`${name}(): the call ran, but ${reason}; retries with this key get this error`);
        }
        finishOrThrow(await execution.finish(KEPT, JSON_HEADERS, encoder.encode(json)));
        return result;
      }
    }
  };

  function storedResult(status: number, body: Uint8Array | null, omitted: boolean): never | Awaited<Result> {
    if (omitted || body === null) {
      throw new ResultNotKeptError(`${name}(): the call ran once, but its result was larger than the store keeps (maxResponseBytes ${store.maxResponseBytes})`);
    }
    const stored = JSON.parse(decoder.decode(body)) as { value?: Awaited<Result>; notKept?: string };
    if (status !== KEPT) throw new ResultNotKeptError(`${name}(): the call ran once, but ${stored.notKept ?? 'its result was not kept'}`);
    return stored.value as Awaited<Result>;
  }
}

/** A completion the store refused (a lost lease, in transactional mode) is the caller's error. */
function finishOrThrow(error: Error | undefined): void {
  if (error !== undefined) throw error;
}

/**
 * The key as an RFC 8941 sf-string, the form the engine's header parser takes with every
 * printable ASCII character; anything else is refused there (`InvalidKeyError`).
 */
function quotedKey(key: string): string {
  return `"${key.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

function fingerprintJson(value: unknown): Uint8Array {
  let json: string | undefined;
  try {
    json = JSON.stringify(value ?? null);
  } catch (error) {
    throw new InvalidOptionError('fingerprint', `the call's fingerprint must be JSON (${(error as Error).message}); give a fingerprint function`);
  }
  if (json === undefined) throw new InvalidOptionError('fingerprint', "the call's fingerprint must be JSON; give a fingerprint function");
  return encoder.encode(json);
}
