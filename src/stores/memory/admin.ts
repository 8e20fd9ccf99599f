/** `store.admin` of the memory store: a pass over its maps, on its (injectable) clock. */
import type { IdempotencyRecord, RecordDetails, RecordRef, StoreAdmin } from '../../core/store.js';
import { isExpiredAt, summarize, tokenPrefix, walkingAdmin } from '../shared/admin.js';

/** What the admin reads of a memory record. */
export interface MemoryRecordView {
  readonly token: string;
  readonly attempt: number;
  readonly bytes: number;
  readonly createdAt: number;
  readonly updatedAt: number;
}

export interface MemoryAccess<R extends MemoryRecordView> {
  readonly now: () => number;
  readonly records: () => Iterable<R>;
  readonly find: (ref: RecordRef) => R | undefined;
  readonly remove: (record: R) => void;
  readonly toRecord: (record: R) => IdempotencyRecord;
}

export function memoryAdmin<R extends MemoryRecordView>(m: MemoryAccess<R>): StoreAdmin {
  const details = (r: R, now: number): RecordDetails => {
    const record = m.toRecord(r);
    return {
      ...record,
      tokenPrefix: tokenPrefix(r.token),
      attempt: r.attempt,
      now,
      expired: isExpiredAt(record, now),
      createdAt: r.createdAt,
      updatedAt: r.updatedAt,
    };
  };
  return walkingAdmin({
    now: async () => m.now(),
    async *each() {
      const now = m.now();
      for (const r of [...m.records()]) yield summarize(details(r, now));
    },
    async inspect(ref) {
      const r = m.find(ref);
      return r && details(r, m.now());
    },
    async purge(ref, force) {
      const r = m.find(ref);
      if (r === undefined) return 'not_found';
      if (m.toRecord(r).state === 'in_flight' && !force) return 'in_flight';
      m.remove(r);
      return 'purged';
    },
    storageBytes: (r) => m.find(r)?.bytes ?? 0,
  });
}
