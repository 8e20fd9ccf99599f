// The two dimensions of an `Execution` (execution.ts): where its claim stands, and how its handler
// asked to end. The moves are pure functions of the current value, so the table below is all
// there is to them; `Execution` applies them and does what each move brings (stopping renewal,
// closing the fence, rolling back).

/**
 * Where an execution's claim stands (`Execution.state`). The spin model (spec/record.pml) has the
 * same moments: `running` is an attempt its `held[me]` holds, `lost` its `lost` (a renewal found
 * the token replaced), `overtime` a freeze that never thaws (`paused` for good), `finished` an
 * attempt past its completion or release, on its way to `reply:` (docs/model.md).
 *
 *   running  -> overtime   expire: a keeper tick at maxExecutionMs; renewal stops, a transaction rolls back
 *   running  -> lost       a renewal the store refused; renewal stops
 *   lost     -> overtime   expire again; the keeper no longer ticks a lost lease, so only a direct renew() gets here
 *   (any but finished) -> finished   finish or abort, whichever comes first
 *
 * Refused, the state unchanged: overtime -> lost (the ceiling's answer already decides the
 * finish; the leaseLost event is still told), and every move out of finished (a second finish or
 * abort, a renewal answered late, expire). `finish` decides on the state the execution ended from.
 */
export type ExecutionState = 'running' | 'overtime' | 'lost' | 'finished';

/** A state an execution can end from: what `finish` and `abort` decide on. */
export type EndedFrom = Exclude<ExecutionState, 'finished'>;

/**
 * How the handler asked its request to end (`Execution.ending`): with its answer, or through its
 * context with nothing stored (`ctx.discard()`) or suspended (`ctx.suspend()`). Not a state of the
 * claim but a dimension of its own: the handler may say it in any state, past the ceiling and
 * even while an abort rolls back (which reads it afterwards), and neither outweighs the other
 * everywhere (at the finish overtime wins in transactional mode, the ending outside it and in an
 * abort). result -> discarded -> suspended, result -> suspended; a discard after a suspend is
 * refused, since suspended wins whatever the order.
 */
export type Ending = 'result' | 'discarded' | 'suspended';

/** `expire`: the ceiling passed. Undefined when refused: already overtime, or finished. */
export function overtimeFrom(state: ExecutionState): 'overtime' | undefined {
  return state === 'running' || state === 'lost' ? 'overtime' : undefined;
}

/** A renewal was refused: only a running execution takes it in; any other state stays. */
export function lostFrom(state: ExecutionState): ExecutionState {
  return state === 'running' ? 'lost' : state;
}

/** `ctx.discard()`: refused after `ctx.suspend()`. */
export function discardedFrom(ending: Ending): Ending {
  return ending === 'result' ? 'discarded' : ending;
}
