/**
 * Recovery points for multi-step handlers (brandur's "atomic phases", Stripe's completer): a
 * request that writes locally, calls a foreign API, then writes again cannot be one transaction,
 * so it is written as named phases. Each local phase commits its writes together with the
 * record's recovery point in one transaction fenced by the owner token; a foreign phase calls out
 * with a key derived from the record, then records its result. A retry that takes the record over
 * resumes after the last committed phase. See docs/recovery.md.
 */
import { createHash } from 'node:crypto';
import type { FencedTransaction } from '../core/engine.js';
import { TransactionalModeError } from '../core/errors.js';
import { PhaseError } from './phase-errors.js';

/** The first recovery point: written before any phase runs, it records the input. */
export const STARTED = 'started';

/**
 * What phases run against: the request's `IdempotencyContext` (from any adapter), or the
 * completer's own claim of an abandoned record. `Tx` is what its transactions hand out, so a
 * definition written for one store's transaction type cannot run on another store's context.
 */
export interface PhaseHost<Tx = unknown> {
  readonly scope: string;
  readonly key: string;
  readonly resumeFrom: string | undefined;
  readonly recoveryData: unknown;
  /** The whole-request transaction of transactional mode; phases refuse to run inside one. */
  readonly tx?: unknown;
  checkpoint(point: string, data?: unknown): Promise<void>;
  beginTransaction(): Promise<FencedTransaction<Tx>>;
  /** Keeps the record (and its recovery points) in flight when a phase fails, instead of storing an answer. */
  suspend?(): void;
}

/**
 * Whether a host's transactions suit phases written for `Tx`: they do when they are `Tx`, and
 * when their type is not known (`unknown`: an Express or Fastify request whose store was not
 * registered); a host of another store's transactions gets a type error naming the type wanted.
 */
export type TxMatch<HostTx, Tx> = [unknown] extends [HostTx] ? unknown : [HostTx] extends [Tx] ? unknown : { readonly 'these phases need transactions of type': Tx };

/** The recovery data every checkpoint of a phases run writes: all a resume needs. */
export interface PhaseState<Input = unknown> {
  /** The definition's name: a completer finds the definition of an abandoned record by it. */
  readonly phases: string;
  readonly input: Input;
  /** Each committed phase's output, by phase name. */
  readonly data: Readonly<Record<string, unknown>>;
}

interface PhaseArgs<Input, Data> {
  /** The input as recorded by the `started` point (on a resume, the first attempt's input). */
  readonly input: Input;
  /** The outputs of the phases before this one. */
  readonly data: Data;
  readonly scope: string;
  readonly key: string;
  /** True when this run resumed a record an earlier owner left. */
  readonly resumed: boolean;
}

export interface LocalPhaseArgs<Input, Data, Tx> extends PhaseArgs<Input, Data> {
  /** The phase's own transaction (the store's driver handle): write through it, or the writes do not commit with the phase. */
  readonly tx: Tx;
}

export interface ForeignPhaseArgs<Input, Data> extends PhaseArgs<Input, Data> {
  /** Send this as the foreign API's idempotency key: the same for every attempt of this phase of this record. */
  readonly foreignKey: string;
}

type Empty = Record<never, never>;

interface PhaseSpec {
  readonly name: string;
  readonly kind: 'local' | 'foreign';
  readonly run: (args: never) => unknown;
}

/**
 * The foreign idempotency key of one phase of one record: 32 hex digits of SHA-256 over scope,
 * key and phase name. Deterministic, so every attempt sends the same key, and opaque, so the
 * client's key never leaks to a third party.
 */
export function foreignKeyFor(scope: string, key: string, phase: string): string {
  return createHash('sha256').update(JSON.stringify(['idemkit-phase', scope, key, phase])).digest('hex').slice(0, 32);
}

/**
 * A phases definition. Immutable: each `phase`/`foreign` returns a new definition whose `Data`
 * type knows the outputs so far; `Result` is the last phase's output, which `run` returns.
 */
export class Phases<Input, Tx, Data = Empty, Result = undefined> {
  readonly name: string;
  private readonly specs: readonly PhaseSpec[];

  /** @internal use `definePhases`. */
  constructor(name: string, specs: readonly PhaseSpec[]) {
    this.name = name;
    this.specs = specs;
  }

  /** The phase names in order (without `started`). */
  get names(): string[] {
    return this.specs.map((s) => s.name);
  }

  /** A local phase: runs in its own store transaction, which commits its writes and its recovery point together. */
  phase<N extends string, R>(
    name: N,
    run: (args: LocalPhaseArgs<Input, Data, Tx>) => R | Promise<R>,
  ): Phases<Input, Tx, Data & { readonly [K in N]: Awaited<R> }, Awaited<R>> {
    return this.add(name, 'local', run);
  }

  /**
   * A foreign phase: runs outside any transaction with `foreignKey`, then records its output. A
   * crash between the call and the record repeats the call with the same key, which the foreign
   * API must deduplicate (Stripe, Adyen and most payment APIs do).
   */
  foreign<N extends string, R>(
    name: N,
    run: (args: ForeignPhaseArgs<Input, Data>) => R | Promise<R>,
  ): Phases<Input, Tx, Data & { readonly [K in N]: Awaited<R> }, Awaited<R>> {
    return this.add(name, 'foreign', run);
  }

  private add<R>(name: string, kind: PhaseSpec['kind'], run: (args: never) => R): Phases<Input, Tx, never, never> {
    if (typeof name !== 'string' || name.trim() === '') {
      throw new PhaseError('EMPTY_PHASE_NAME', `phases "${this.name}": a phase name must be a non-empty string (phase #${this.specs.length + 1})`);
    }
    if (name === STARTED) {
      throw new PhaseError('RESERVED_PHASE', `phases "${this.name}": the phase name "${STARTED}" is reserved for the recovery point that records the input`, name);
    }
    if (this.specs.some((s) => s.name === name)) {
      throw new PhaseError('DUPLICATE_PHASE', `phases "${this.name}": the phase name "${name}" is used twice; each phase needs its own recovery point`, name);
    }
    if (typeof run !== 'function') throw new PhaseError('INVALID_PHASE', `phases "${this.name}": phase "${name}" needs a function`, name);
    return new Phases(this.name, [...this.specs, { name, kind, run }]);
  }

  /**
   * Runs the phases for one claimed request: from the start on a fresh claim (recording `input`
   * as the `started` point), or after the recorded phase on a take-over (with the recorded input;
   * `input` is then ignored). Returns the last phase's output; a record whose phases all committed
   * returns it again without running anything. When a phase throws, its transaction rolls back,
   * the host is suspended (the record stays in flight, resumable) and the error is rethrown.
   */
  async run<HostTx>(host: PhaseHost<HostTx> & TxMatch<HostTx, Tx>, input?: Input): Promise<Result> {
    if (this.specs.length === 0) throw new PhaseError('NO_PHASES', `phases "${this.name}" has no phases`);
    if (!host || typeof host.checkpoint !== 'function' || typeof host.beginTransaction !== 'function') {
      throw new PhaseError('NO_CONTEXT', `phases "${this.name}": run() needs the request's idempotency context (was the request protected?)`);
    }
    if (host.tx !== undefined) {
      throw new TransactionalModeError(
        `phases "${this.name}" cannot run in transactional mode: each phase commits on its own, while that mode commits the whole request once (turn \`transactional\` off for this route)`,
      );
    }
    const resumed = host.resumeFrom !== undefined;
    let state: PhaseState<Input>;
    let next: number;
    if (host.resumeFrom === undefined) {
      state = { phases: this.name, input: toJson(this.name, STARTED, input) as Input, data: {} };
      next = 0;
    } else {
      state = this.readState(host.resumeFrom, host.recoveryData);
      next = host.resumeFrom === STARTED ? 0 : this.specs.findIndex((s) => s.name === host.resumeFrom) + 1;
    }
    try {
      if (!resumed) await host.checkpoint(STARTED, state);
      for (let i = next; i < this.specs.length; i++) state = await this.runPhase(host, this.specs[i]!, state, resumed);
    } catch (error) {
      host.suspend?.();
      throw error;
    }
    return state.data[this.specs[this.specs.length - 1]!.name] as Result;
  }

  /** Validates a record's recovery point and data against this definition. */
  readState(point: string, recoveryData: unknown): PhaseState<Input> {
    if (point !== STARTED && !this.specs.some((s) => s.name === point)) {
      throw new PhaseError(
        'UNKNOWN_PHASE',
        `phases "${this.name}": the record's recovery point "${point}" names no phase (known: ${[STARTED, ...this.names].join(', ')})`,
        point,
      );
    }
    const state = recoveryData as Partial<PhaseState<Input>> | null | undefined;
    if (!state || typeof state !== 'object' || typeof state.phases !== 'string' || !state.data || typeof state.data !== 'object') {
      throw new PhaseError('CORRUPT_RECOVERY_DATA', `phases "${this.name}": the recovery data at "${point}" is not a phases state`, point);
    }
    if (state.phases !== this.name) {
      throw new PhaseError('DEFINITION_MISMATCH', `phases "${this.name}": the record was written by phases "${state.phases}"`, point);
    }
    return { phases: state.phases, input: state.input as Input, data: state.data };
  }

  private async runPhase(host: PhaseHost<unknown>, spec: PhaseSpec, state: PhaseState<Input>, resumed: boolean): Promise<PhaseState<Input>> {
    const base = { input: state.input, data: state.data, scope: host.scope, key: host.key, resumed };
    const record = (output: unknown): PhaseState<Input> => Object.assign({}, state, { data: Object.assign({}, state.data, { [spec.name]: toJson(this.name, spec.name, output) }) });
    if (spec.kind === 'foreign') {
      const run = spec.run as (args: ForeignPhaseArgs<Input, unknown>) => unknown;
      const next = record(await run(Object.assign(base, { foreignKey: foreignKeyFor(host.scope, host.key, spec.name) })));
      await host.checkpoint(spec.name, next);
      return next;
    }
    const run = spec.run as (args: LocalPhaseArgs<Input, unknown, Tx>) => unknown;
    const transaction = await host.beginTransaction();
    try {
      const next = record(await run(Object.assign(base, { tx: transaction.tx as Tx })));
      // Fenced: a request that lost its lease fails here, and its writes roll back with it.
      await transaction.checkpoint(spec.name, next);
      await transaction.commit();
      return next;
    } catch (error) {
      await transaction.rollback().catch(() => {});
      throw error;
    }
  }
}

/**
 * Starts a phases definition. `name` is recorded with every recovery point, so a completer can
 * tell which definition resumes a record; keep it stable across deploys, like the phase names.
 */
export function definePhases<Input, Tx = unknown>(name: string): Phases<Input, Tx> {
  if (typeof name !== 'string' || name.trim() === '') throw new PhaseError('EMPTY_PHASE_NAME', 'definePhases(name): the definition needs a non-empty name');
  return new Phases<Input, Tx>(name, []);
}

/**
 * Outputs pass through JSON once, so a fresh run sees exactly what a resumed run will read back
 * (a Date becomes its string either way), and what cannot be kept fails now, naming the phase.
 */
function toJson(definition: string, phase: string, value: unknown): unknown {
  if (value === undefined) return undefined;
  try {
    const text = JSON.stringify(value);
    return text === undefined ? undefined : (JSON.parse(text) as unknown);
  } catch (error) {
    const what = phase === STARTED ? 'the input' : `the output of phase "${phase}"`;
    throw new PhaseError('OUTPUT_NOT_JSON', `phases "${definition}": ${what} cannot be kept as JSON`, phase, { cause: error });
  }
}
