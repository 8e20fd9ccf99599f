/**
 * State machines and the conditional update that moves a row along one:
 * `UPDATE … SET status = :to WHERE <row> AND status IN (:from…)`. The check and the write are one
 * statement, so two racing requests cannot both move the row; the loser learns the current state.
 */
import { InvalidOptionError } from '../core/errors.js';
import { IllegalTransitionError, InvalidStateMachineError, UnknownStateError } from './errors.js';
import { column, entries, table as tableName, whereClause } from './identifiers.js';
import { optionReader } from '../core/option-reader.js';
import { sqlExecutor } from '../drivers/sql-executor.js';
import type { SqlDatabase, SqlExecutor } from '../drivers/sql-executor.js';

/** Each state → the states it may move to (a final state maps to `[]`). */
export type StateMachineDefinition<S extends string = string> = { readonly [state in S]: readonly S[] };

export interface StateMachine<S extends string = string> {
  readonly states: readonly S[];
  /** True when `from → to` is declared. Throws UnknownStateError for an undeclared name. */
  can(from: S, to: S): boolean;
  /** Throws UnknownStateError or IllegalTransitionError unless `from → to` is declared. */
  assert(from: S, to: S): void;
  /** The states that may move to `to`. */
  sources(to: S): S[];
  /** The states `from` may move to. */
  targets(from: S): S[];
}

/** Checks the definition (every target is a declared state) and answers the machine. */
export function stateMachine<S extends string>(definition: { readonly [state in S]: readonly NoInfer<S>[] }): StateMachine<S> {
  if (typeof definition !== 'object' || definition === null || Array.isArray(definition)) {
    throw new InvalidStateMachineError('expected an object of state -> allowed next states');
  }
  const states = Object.keys(definition) as S[];
  if (states.length === 0) throw new InvalidStateMachineError('it declares no state');
  const edges = new Map<S, Set<S>>();
  for (const state of states) {
    if (state.length === 0) throw new InvalidStateMachineError('a state name is empty', state);
    const targets: unknown = definition[state];
    if (!Array.isArray(targets)) throw new InvalidStateMachineError(`${JSON.stringify(state)} must map to an array of states (use [] for a final state)`, state);
    for (const target of targets) {
      if (typeof target !== 'string' || !Object.hasOwn(definition, target)) {
        throw new InvalidStateMachineError(`${JSON.stringify(state)} -> ${JSON.stringify(target)}: the target is not a declared state`, state);
      }
    }
    edges.set(state, new Set(targets as S[]));
  }
  const known = (field: string, state: S) => {
    if (typeof state !== 'string' || !edges.has(state)) throw new UnknownStateError(field, String(state), states);
  };
  const can = (from: S, to: S) => {
    known('from', from);
    known('to', to);
    return edges.get(from)!.has(to);
  };
  return {
    states,
    can,
    assert(from, to) {
      if (!can(from, to)) throw new IllegalTransitionError(from, to, [...edges.get(from)!]);
    },
    sources(to) {
      known('to', to);
      return states.filter((s) => edges.get(s)!.has(to));
    },
    targets(from) {
      known('from', from);
      return [...edges.get(from)!];
    },
  };
}

export interface TransitionOptions<S extends string = string> {
  /** The table, optionally `schema.table`. */
  readonly table: string;
  /** Column → value identifying the row (one row; NULL matches with IS NULL). */
  readonly where: Readonly<Record<string, unknown>>;
  /** The state column. @default 'status' */
  readonly column?: string;
  /**
   * The state(s) the row may be in for the change to happen. With a `machine` it may be left out:
   * then every state the machine allows to move to `to`.
   */
  readonly from?: S | readonly S[];
  /** The new state. */
  readonly to: S;
  /** Other columns written in the same statement (e.g. `paid_at`), only when the state changes. */
  readonly set?: Readonly<Record<string, unknown>>;
  /** Checked before any SQL runs: every `from → to` must be declared. */
  readonly machine?: StateMachine<S>;
}

export type TransitionResult<S extends string = string> =
  | { readonly changed: true }
  /** The row was not in a `from` state: `current` is its state now, undefined when there is no such row. */
  | { readonly changed: false; readonly current: S | undefined };

/**
 * Moves one row from one of `from` to `to` in one conditional UPDATE. A repeated request (the row
 * is already in `to`) and a lost race both answer `{ changed: false, current }`.
 */
export async function transition<S extends string = string>(
  db: SqlDatabase | SqlExecutor,
  options: TransitionOptions<S>,
): Promise<TransitionResult<S>> {
  const read = optionReader('transition()', options);
  const machine = read.value('machine');
  const to = read.value('to');
  if (machine !== undefined && (typeof machine !== 'object' || typeof machine.assert !== 'function')) {
    throw new InvalidOptionError('machine', 'expected a stateMachine(...)');
  }
  if (typeof to !== 'string') throw new InvalidOptionError('to', 'expected a state name');
  let from: S[];
  if (read.value('from') === undefined) {
    if (!machine) throw new InvalidOptionError('from', 'expected the state(s) the row must be in (or pass a `machine`)');
    from = machine.sources(to);
    if (from.length === 0) throw new IllegalTransitionError('*', to, []);
  } else {
    from = (Array.isArray(options.from) ? [...options.from] : [options.from]) as S[];
    if (from.length === 0 || from.some((s) => typeof s !== 'string')) throw new InvalidOptionError('from', 'expected a state name or a non-empty list of them');
  }
  // The machine is consulted before any SQL, so an illegal request never touches the database.
  if (machine) for (const f of from) machine.assert(f, to);

  const x = sqlExecutor(db);
  const d = x.dialect;
  const table = tableName('table', read.value('table'), d);
  const state = column('column', read.value('column') ?? 'status', d);
  const where = whereClause('where', read.value('where'), d);
  const extra = entries('set', read.value('set') ?? {}, d, true);
  read.done();
  if (extra.some(([c]) => c === state)) throw new InvalidOptionError('set', 'must not write the state column; use `to`');

  const assignments = [`${state} = ?`, ...extra.map(([c]) => `${c} = ?`)].join(', ');
  const params = [to, ...extra.map(([, v]) => v), ...where.params, ...from];
  const { affected } = await x.query(
    `UPDATE ${table} SET ${assignments} WHERE ${where.sql} AND ${state} IN (${from.map(() => '?').join(', ')})`,
    params,
  );
  if (affected > 0) return { changed: true };
  const { rows } = await x.query<Record<string, unknown>>(`SELECT ${state} AS s FROM ${table} WHERE ${where.sql}`, where.params);
  const current = rows[0]?.s;
  return { changed: false, current: current === undefined || current === null ? undefined : (String(current) as S) };
}
