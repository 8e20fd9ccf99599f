import { InvalidRecordRefError } from './errors.js';
import type { RecordRef } from './store.js';

export { MAX_TIMER_MS } from './option-reader.js';

/**
 * Refuses a record reference that a store could not keep apart from another one: a scope or key
 * that is not a string, or not well-formed UTF-16. A lone surrogate (`'\uD800'`, `'\uDC00'`, or a
 * low one before a high one) has no UTF-8 form: `pg` and others send it as U+FFFD, so two
 * different scopes would become one stored text and share a record. Every store runs this on
 * every call that takes a ref; it is on the hot path, and costs a few ns (`isWellFormed` answers
 * at once for a one-byte string). Throws `InvalidRecordRefError` naming the field.
 */
export function checkRecordRef(ref: RecordRef): void {
  const { scope, key } = ref;
  if (typeof scope !== 'string' || !scope.isWellFormed()) throw new InvalidRecordRefError('scope', illFormed(scope));
  if (typeof key !== 'string' || !key.isWellFormed()) throw new InvalidRecordRefError('key', illFormed(key));
}

/** Why a value is not a well-formed string: its type, or the first lone surrogate and where it is. */
function illFormed(value: unknown): string {
  if (typeof value !== 'string') return `expected a string, got ${value === null ? 'null' : typeof value}`;
  for (let i = 0; i < value.length; i++) {
    const unit = value.charCodeAt(i);
    if (unit < 0xd800 || unit > 0xdfff) continue;
    const next = value.charCodeAt(i + 1);
    if (unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      i++;
      continue;
    }
    const hex = unit.toString(16).toUpperCase();
    const kind = unit <= 0xdbff ? 'high' : 'low';
    return (
      `a lone ${kind} surrogate U+${hex} at index ${i}: the text is not well-formed UTF-16 and has no exact UTF-8 form ` +
      '(drivers store it as U+FFFD), so two different values could share one record'
    );
  }
  return 'not well-formed UTF-16';
}
