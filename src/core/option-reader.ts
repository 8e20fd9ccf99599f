import { InvalidOptionError, PROBLEM_BASE } from './errors.js';

/** The longest delay `setTimeout` honours; a larger one fires after 1 ms. */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * An HTTP token (RFC 9110 §5.6.2): what a method or a header field name may be made of. The one
 * definition the middleware, the client and `idemkit check` validate names with.
 */
export const HTTP_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

export function isHttpToken(value: unknown): value is string {
  return typeof value === 'string' && HTTP_TOKEN.test(value);
}

/**
 * What to do when the option is absent. With `default`, that value; with `required: true`, the
 * absent value is refused like any wrong one; with neither, `undefined` is answered.
 */
export interface Presence<D> {
  readonly default?: D;
  readonly required?: boolean;
}

export interface IntegerRule extends Presence<number> {
  /** @default 0 */
  readonly min?: number;
  readonly max?: number;
}

export interface DurationRule extends Presence<number> {
  /** @default 0 */
  readonly min?: number;
  /** Accept `Infinity` (no limit). @default false */
  readonly infinity?: boolean;
}

export interface NumberRule extends Presence<number> {
  readonly min?: number;
  readonly max?: number;
}

export interface FunctionRule<F> extends Presence<F> {
  /** What the error says was expected. @default 'a function' */
  readonly expected?: string;
}

/** The type a read answers: `T`, or also `undefined` when the option may be absent without a default. */
export type Read<R, T> = R extends { readonly default: infer D } ? T | D : R extends { readonly required: true } ? T : T | undefined;

/*
 * The checks, on one value: used by the reader, and directly for a value that is an argument
 * rather than an option (a lock's `ttlMs`, `listAbandoned(limit)`).
 */

/** An integer in [min, max]. */
export function checkInteger<R extends IntegerRule>(name: string, value: unknown, rule: R): Read<R, number> {
  if (value === undefined && !rule.required) return rule.default as Read<R, number>;
  const min = rule.min ?? 0;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new InvalidOptionError(name, `expected an integer >= ${min}, got ${String(value)}`);
  }
  if (rule.max !== undefined && value > rule.max) throw new InvalidOptionError(name, `expected at most ${rule.max}, got ${value}`);
  return value as Read<R, number>;
}

/**
 * A duration in ms: an integer in [min, MAX_TIMER_MS], or `Infinity` (no limit) when allowed.
 * Larger finite values are refused because a timer would fire at once.
 */
export function checkDuration<R extends DurationRule>(name: string, value: unknown, rule: R): Read<R, number> {
  if (value === Infinity && rule.infinity) return Infinity as Read<R, number>;
  const ms = checkInteger(name, value, { min: rule.min ?? 0, required: rule.required }) as number | undefined;
  if (ms === undefined) return rule.default as Read<R, number>;
  if (ms > MAX_TIMER_MS) {
    throw new InvalidOptionError(name, `expected at most ${MAX_TIMER_MS} ms${rule.infinity ? ' (use Infinity for no limit)' : ''}, got ${ms}`);
  }
  return ms as Read<R, number>;
}

/** A finite number in [min, max] (a ratio, a factor). */
export function checkNumber<R extends NumberRule>(name: string, value: unknown, rule: R): Read<R, number> {
  if (value === undefined && !rule.required) return rule.default as Read<R, number>;
  const { min = -Infinity, max = Infinity } = rule;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
    const range = max === Infinity ? `a finite number >= ${min}` : min === -Infinity ? `a finite number <= ${max}` : `a number between ${min} and ${max}`;
    throw new InvalidOptionError(name, `expected ${range}, got ${String(value)}`);
  }
  return value as Read<R, number>;
}

export function checkBoolean<R extends Presence<boolean>>(name: string, value: unknown, rule: R): Read<R, boolean> {
  if (value === undefined && !rule.required) return rule.default as Read<R, boolean>;
  if (typeof value !== 'boolean') throw new InvalidOptionError(name, `expected a boolean, got ${typeof value}`);
  return value as Read<R, boolean>;
}

/** A non-empty list of HTTP tokens (method names). */
export function checkTokens(name: string, value: unknown, what: string): readonly string[] {
  if (!Array.isArray(value) || !value.every(isHttpToken)) throw new InvalidOptionError(name, `expected an array of ${what}`);
  return value;
}

/** Characters a URI may hold (RFC 3986 §2): no space, no control, nothing to escape. */
const URI_CHARACTERS = /^[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]+$/;
/** A URN's start (RFC 8141): `urn:`, a namespace identifier, `:`. */
const URN_START = /^urn:[A-Za-z0-9][A-Za-z0-9-]{0,30}[A-Za-z0-9]:/i;

/**
 * The base a problem `type` is made of (`problemTypeBase`): each problem appends its slug. An
 * absolute URI ending in `/` or `#` (`https://docs.example.com/problems/`, with no query), or a URN
 * or tag URI ending in `:` (`urn:example:problem:`), so that base + slug is itself a URI.
 * Absent, the default `urn:idemkit:problem:`.
 */
export function checkProblemTypeBase(name: string, value: unknown): string {
  if (value === undefined) return PROBLEM_BASE;
  const expected =
    'expected an absolute URI ending in `/` or `#` (https://docs.example.com/problems/) or a URN ending in `:` (urn:example:problem:), to which each problem appends its slug';
  const got = `got ${JSON.stringify(value) ?? String(value)}`;
  if (typeof value !== 'string' || !URI_CHARACTERS.test(value) || !/^[A-Za-z][A-Za-z0-9+.-]*:/.test(value)) {
    throw new InvalidOptionError(name, `${expected}; ${got}`);
  }
  const scheme = value.slice(0, value.indexOf(':')).toLowerCase();
  const last = value.at(-1);
  let why: string | undefined;
  if (scheme === 'urn') {
    if (!URN_START.test(value)) why = 'a URN starts `urn:<namespace>:`';
    else if (last !== ':') why = 'a URN base ends in `:`';
    else if (/[?#]/.test(value)) why = 'a URN base has no `?` or `#`';
  } else if (last !== '/' && last !== '#' && !(scheme === 'tag' && last === ':')) {
    why = 'the base must end in `/` or `#`';
  } else if (value.includes('?')) {
    why = 'the base has no query (`?`)';
  } else if (value.indexOf('#') !== -1 && value.indexOf('#') !== value.length - 1) {
    why = 'a `#` may only end the base';
  } else if (!URL.canParse(value + 'slug')) {
    why = 'it is not an absolute URI';
  }
  if (why !== undefined) throw new InvalidOptionError(name, `${expected}; ${why}, ${got}`);
  return value;
}

/**
 * Reads one options object: each `read.<kind>(name, rule)` validates one option and names it in
 * the error; `done()` then refuses every key nothing read, with a hint at the name that was meant.
 * The known keys are the ones read (plus `accept(...)`), so an option is declared once, where it
 * is validated.
 */
export class OptionReader<O extends object> {
  readonly #owner: string;
  readonly #options: O;
  readonly #path: string;
  readonly #suffix: string;
  readonly #aliases: Readonly<Record<string, string>>;
  readonly #known: string[] = [];

  constructor(owner: string, options: O, settings: ReaderSettings = {}) {
    this.#owner = owner;
    this.#path = settings.path === undefined ? '' : `${settings.path}.`;
    this.#suffix = settings.suffix ?? '';
    this.#aliases = settings.aliases ?? {};
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw new InvalidOptionError((settings.path ?? 'options') + this.#suffix, 'expected an object');
    }
    this.#options = options;
  }

  /** The name errors give the option: `retryBudget.ratio`, `config.idempotency.required of /orders`. */
  name(key: keyof O & string): string {
    return this.#path + key + this.#suffix;
  }

  /** Throws `InvalidOptionError` naming the option. */
  fail(key: keyof O & string, message: string): never {
    throw new InvalidOptionError(this.name(key), message);
  }

  /** The value as given, unchecked (the caller checks it); marks the key as known. */
  value<K extends keyof O & string>(key: K): O[K] {
    this.#known.push(key);
    return this.#options[key];
  }

  /** Keys accepted without being read here: documented but unused, or read by someone else. */
  accept(...keys: Array<keyof O & string>): void {
    this.#known.push(...keys);
  }

  integer<K extends keyof O & string, R extends IntegerRule>(key: K, rule: R): Read<R, number> {
    return checkInteger(this.name(key), this.value(key), rule);
  }

  duration<K extends keyof O & string, R extends DurationRule>(key: K, rule: R): Read<R, number> {
    return checkDuration(this.name(key), this.value(key), rule);
  }

  number<K extends keyof O & string, R extends NumberRule>(key: K, rule: R): Read<R, number> {
    return checkNumber(this.name(key), this.value(key), rule);
  }

  boolean<K extends keyof O & string, R extends Presence<boolean>>(key: K, rule: R): Read<R, boolean> {
    return checkBoolean(this.name(key), this.value(key), rule);
  }

  /** One of a few strings; the error lists them. */
  oneOf<K extends keyof O & string, V extends string, R extends Presence<V>>(key: K, values: readonly V[], rule: R): Read<R, V> {
    const value = this.value(key) as unknown;
    if (value === undefined && !rule.required) return rule.default as Read<R, V>;
    if (!values.includes(value as V)) {
      const list = values.map((v) => `'${v}'`);
      const expected = list.length > 1 ? `${list.slice(0, -1).join(', ')} or ${list.at(-1)}` : list.join('');
      this.fail(key, `expected ${expected}, got ${JSON.stringify(value) ?? String(value)}`);
    }
    return value as Read<R, V>;
  }

  function<K extends keyof O & string, R extends FunctionRule<Exclude<O[K], undefined>>>(key: K, rule?: R): Read<R, Exclude<O[K], undefined>> {
    const value = this.value(key) as unknown;
    if (value === undefined && !rule?.required) return rule?.default as Read<R, Exclude<O[K], undefined>>;
    if (typeof value !== 'function') this.fail(key, `expected ${rule?.expected ?? 'a function'}`);
    return value as Read<R, Exclude<O[K], undefined>>;
  }

  /**
   * The driver object the user passes (a pool, a client, a database), recognised by the methods
   * idemkit calls on it; the error says what was expected and which method is missing. `rule.refuse`
   * tells apart a look-alike (a pg Client where a Pool belongs): it answers why the value is not
   * the one expected, or undefined when it is.
   */
  driver<K extends keyof O & string>(key: K, methods: readonly string[], expected: string, rule?: DriverRule & { readonly optional?: false }): Exclude<O[K], undefined>;
  driver<K extends keyof O & string>(key: K, methods: readonly string[], expected: string, rule: DriverRule & { readonly optional: true }): Exclude<O[K], undefined> | undefined;
  driver<K extends keyof O & string>(key: K, methods: readonly string[], expected: string, rule: DriverRule = {}): Exclude<O[K], undefined> | undefined {
    const value = this.value(key) as unknown;
    if (value === undefined && rule.optional) return undefined;
    if (value === undefined || value === null || (typeof value !== 'object' && typeof value !== 'function')) this.fail(key, `expected ${expected}`);
    const refused = rule.refuse?.(value);
    if (refused !== undefined) this.fail(key, `expected ${expected}; ${refused}`);
    const missing = methods.find((method) => typeof (value as Record<string, unknown>)[method] !== 'function');
    if (missing !== undefined) this.fail(key, `expected ${expected} (this one has no \`${missing}()\` method)`);
    return value as Exclude<O[K], undefined>;
  }

  /** A list of HTTP method names (tokens), upper-cased. */
  methods<K extends keyof O & string>(key: K, fallback: readonly string[]): ReadonlySet<string> {
    const value = this.value(key) ?? fallback;
    return new Set(checkTokens(this.name(key), value, 'HTTP method names').map((m) => m.toUpperCase()));
  }

  /** A header field name (an HTTP token). */
  header<K extends keyof O & string>(key: K, fallback: string): string {
    const value = this.value(key) ?? fallback;
    if (!isHttpToken(value)) this.fail(key, 'expected a header name');
    return value;
  }

  /** A problem type base (`problemTypeBase`), checked by `checkProblemTypeBase`; the default URN base when absent. */
  problemTypeBase<K extends keyof O & string>(key: K): string {
    return checkProblemTypeBase(this.name(key), this.value(key));
  }

  /** A nested options object, read by its own reader (`keyPolicy.minLength`); undefined when absent. */
  object<K extends keyof O & string>(key: K): OptionReader<Exclude<O[K], undefined> & object> | undefined {
    const value = this.value(key);
    if (value === undefined) return undefined;
    return new OptionReader(`\`${this.name(key)}\``, value as Exclude<O[K], undefined> & object, {
      path: this.#path + key,
      suffix: this.#suffix,
    });
  }

  /** Refuses every key that was not read nor accepted, suggesting the name that was probably meant. */
  done(): void {
    for (const key of Object.keys(this.#options)) {
      if (this.#known.includes(key)) continue;
      throw new InvalidOptionError(this.#path + key + this.#suffix, `unknown option; ${this.#hint(key)}`);
    }
  }

  #hint(key: string): string {
    const alias = Object.hasOwn(this.#aliases, key) ? this.#aliases[key] : undefined;
    if (alias !== undefined) return `use \`${alias}\``;
    const known = [...new Set(this.#known)];
    const meant = closestName(key, known);
    if (meant !== undefined) return `did you mean \`${meant}\`?`;
    return known.length === 0 ? `${this.#owner} takes no options` : `${this.#owner} takes ${known.map((k) => `\`${k}\``).join(', ')}`;
  }
}

export interface DriverRule {
  /** Absent is fine (undefined is answered). @default false */
  readonly optional?: boolean;
  /** Why `value` is a look-alike and not the driver expected, or undefined when it is the one. */
  readonly refuse?: (value: object) => string | undefined;
}

export interface ReaderSettings {
  /** The parent option of a nested object (`retryBudget`): errors name `retryBudget.ratio`. */
  readonly path?: string;
  /** Appended to every option name in errors (` of /orders`). */
  readonly suffix?: string;
  /** Names other libraries use, pointed at ours: `{ retry: 'retries' }` answers "use `retries`". */
  readonly aliases?: Readonly<Record<string, string>>;
}

/** A reader of `options` for `owner` (a call such as `'memoryStore()'`, used in messages). */
export function optionReader<O extends object>(owner: string, options: O, settings?: ReaderSettings): OptionReader<O> {
  return new OptionReader(owner, options, settings);
}

/**
 * The known name closest to `name`, when it is close enough to be the one meant: the same but for
 * case, `_` or `-` (`leaseMS`, `lease_ms`), a few letters apart (`sweepIntrval`, `maxRecord`), or
 * its start (`lease` for `leaseMs`, `minLen` for `minLength`).
 */
export function closestName(name: string, known: readonly string[]): string | undefined {
  const fold = (s: string) => s.toLowerCase().replace(/[-_]/g, '');
  const folded = fold(name);
  const limit = folded.length < 5 ? 1 : folded.length < 9 ? 2 : 3;
  let best: string | undefined;
  let bestDistance = limit + 1;
  for (const candidate of known) {
    const other = fold(candidate);
    // A prefix counts as one edit: closer than any real typo but an exact fold.
    const d = folded.length >= 3 && other.startsWith(folded) ? Math.min(1, other.length - folded.length) : editDistance(folded, other, bestDistance);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/** Edit distance with adjacent transpositions (optimal string alignment); answers `cap` once it is reached. */
function editDistance(a: string, b: string, cap: number): number {
  if (Math.abs(a.length - b.length) >= cap) return cap;
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, before[j - 2]! + 1);
      current.push(d);
      rowMin = Math.min(rowMin, d);
    }
    if (rowMin >= cap) return cap;
    before = previous;
    previous = current;
  }
  return Math.min(previous[b.length]!, cap);
}
