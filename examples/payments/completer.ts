/**
 * The completer: drives what crashed requests left behind to an end, without waiting for clients.
 *
 * 1. Abandoned idempotency records (in flight, lease run out, nobody retrying): take the record
 *    over with its own fingerprint, then
 *    - a payment that reached a recovery point is resumed at that point (same channel key, so
 *      the channel charges once) and its answer is stored as the record's result;
 *    - a record without a recovery point had nothing committed (the transaction rolled back), so
 *      the claim is released: a later retry with the key runs afresh.
 * 2. Payments submitted long ago whose order is still UNPAID: the notification was lost, so ask
 *    the channel (active query) and settle through the same insert-once path as the callback.
 *
 * LOCAL: written here while the RECOVERY helper's generic completer (idemkit/patterns) is being
 * built; the store part (listAbandoned + claim + complete) is the same contract.
 */
import type { IdempotencyStore, StoredResponse } from 'idemkit';
import { canListAbandoned } from 'idemkit';
import type { SqlExecutor } from 'idemkit/patterns';
import type { PayState, payer } from './pay.js';
import type { TableNames } from './schema.js';
import { settle } from './settle.js';

export interface CompleterDeps {
  readonly db: SqlExecutor;
  readonly t: TableNames;
  readonly store: IdempotencyStore;
  readonly pay: ReturnType<typeof payer>;
  readonly channelUrl: string;
  readonly leaseMs: number;
  readonly windowMs: number;
  /** Submitted payments older than this without a PAID order are queried at the channel. */
  readonly queryAfterMs: number;
  readonly onError: (error: unknown) => void;
}

export interface CompleterStats {
  resumed: number;
  released: number;
  queried: number;
  settledByQuery: number;
}

const json = (status: number, body: unknown): StoredResponse => ({
  status,
  headers: [['content-type', status >= 400 ? 'application/problem+json' : 'application/json; charset=utf-8']],
  body: new TextEncoder().encode(JSON.stringify(body)),
  bodyOmitted: false,
});

export function completer(deps: CompleterDeps) {
  const stats: CompleterStats = { resumed: 0, released: 0, queried: 0, settledByQuery: 0 };
  const { store } = deps;

  async function abandonedRecords(): Promise<void> {
    if (!canListAbandoned(store)) return;
    for (const record of await store.listAbandoned(50)) {
      const ref = { scope: record.scope, key: record.key };
      const claim = await store.claim(ref, record.fingerprint, { leaseMs: deps.leaseMs, windowMs: deps.windowMs });
      if (claim.kind !== 'acquired') continue; // a client retry got there first, or it completed meanwhile
      const state = claim.recoveryData as PayState | undefined;
      if (claim.resumeFrom && state?.kind === 'pay') {
        const answer = await deps.pay({
          scope: ref.scope,
          key: ref.key,
          orderId: state.orderId,
          resume: state,
          resumeFrom: claim.resumeFrom,
          checkpoint: (point, data) => store.checkpoint(ref, claim.token, point, data),
        });
        await store.complete(ref, claim.token, json(answer.status, answer.body));
        stats.resumed++;
      } else {
        await store.release(ref, claim.token);
        stats.released++;
      }
    }
  }

  async function lostNotifications(): Promise<void> {
    const { t } = deps;
    const stale = await deps.db.query<{ order_id: string; channel_key: string; amount: number }>(
      `SELECT p.order_id, p.channel_key, o.amount FROM ${t.payments} p JOIN ${t.orders} o ON o.id = p.order_id
        WHERE p.status = 'SUBMITTED' AND o.status = 'UNPAID' AND p.updated_at < ? LIMIT 50`,
      [Date.now() - deps.queryAfterMs],
    );
    for (const row of stale.rows) {
      stats.queried++;
      const response = await fetch(`${deps.channelUrl}/charges/${encodeURIComponent(row.channel_key)}`, { signal: AbortSignal.timeout(2_000) });
      if (!response.ok) continue;
      const charge = (await response.json()) as { txnId: string; status: string };
      if (charge.status !== 'SUCCESS') continue;
      if ((await settle(deps.db, t, { txnId: charge.txnId, orderId: row.order_id, amount: Number(row.amount) })) === 'applied') stats.settledByQuery++;
    }
  }

  let running = false;
  return {
    stats,
    /** One pass; overlapping calls are skipped. */
    async run(): Promise<void> {
      if (running) return;
      running = true;
      try {
        await abandonedRecords();
        await lostNotifications();
      } catch (error) {
        deps.onError(error);
      } finally {
        running = false;
      }
    },
  };
}
