import { describe, expect, it } from 'vitest';
import { IllegalTransitionError, InvalidStateMachineError, UnknownStateError } from '../../src/patterns/errors.js';
import { stateMachine } from '../../src/patterns/state-machine.js';

describe('stateMachine', () => {
  const orders = stateMachine({ PENDING: ['PAID', 'CANCELLED'], PAID: ['REFUNDED'], CANCELLED: [], REFUNDED: [] });

  it('answers what is allowed', () => {
    expect(orders.states).toEqual(['PENDING', 'PAID', 'CANCELLED', 'REFUNDED']);
    expect(orders.can('PENDING', 'PAID')).toBe(true);
    expect(orders.can('PAID', 'PENDING')).toBe(false);
    expect(orders.can('PAID', 'PAID')).toBe(false);
    expect(orders.targets('PENDING')).toEqual(['PAID', 'CANCELLED']);
    expect(orders.sources('REFUNDED')).toEqual(['PAID']);
    expect(orders.sources('PENDING')).toEqual([]);
    expect(() => orders.assert('PENDING', 'CANCELLED')).not.toThrow();
  });

  it('refuses illegal transitions and unknown states with typed errors naming them', () => {
    const illegal = (() => {
      try {
        orders.assert('CANCELLED', 'PAID');
      } catch (e) {
        return e;
      }
    })() as IllegalTransitionError;
    expect(illegal).toBeInstanceOf(IllegalTransitionError);
    expect(illegal).toMatchObject({ code: 'ILLEGAL_TRANSITION', from: 'CANCELLED', to: 'PAID' });
    expect(illegal.message).toContain('it is final');
    expect(() => orders.assert('PAID', 'PENDING')).toThrow(/allows "REFUNDED"/);
    expect(() => orders.can('PENDING', 'SHIPPED' as never)).toThrow(UnknownStateError);
    expect(() => orders.can('NEW' as never, 'PAID')).toThrow(expect.objectContaining({ code: 'UNKNOWN_STATE', state: 'NEW', field: 'from' }));
  });

  it('validates the definition itself', () => {
    expect(() => stateMachine({ A: ['B'] } as never)).toThrow(InvalidStateMachineError);
    expect(() => stateMachine({ A: ['B'] } as never)).toThrow(/"A" -> "B": the target is not a declared state/);
    expect(() => stateMachine({ A: 'B' } as never)).toThrow(expect.objectContaining({ code: 'INVALID_STATE_MACHINE', state: 'A' }));
    expect(() => stateMachine({} as never)).toThrow(/no state/);
    expect(() => stateMachine(null as never)).toThrow(InvalidStateMachineError);
    expect(() => stateMachine({ A: [1] } as never)).toThrow(/target is not a declared state/);
  });
});
