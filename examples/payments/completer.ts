/**
 * What crashed or abandoned work leaves behind, driven to an end without waiting for clients:
 *
 * 1. Abandoned pay requests: idemkit/patterns' `completer` lists in-flight records whose lease ran
 *    out, takes each over with its own fingerprint (so it cannot race a client retry into a second
 *    run), resumes the phases after the last recovery point (same channel key: the channel
 *    charges once) and stores the 202 that a later retry replays.
 * 2. Lost notifications: a payment submitted long ago whose order is still UNPAID is looked up at
 *    the channel (active query), then settled through the same insert-once path as the callback.
 */
import type { AbandonedRecords, TransactionalStore } from 'idemkit';
import { completer } from 'idemkit/patterns';
import type { PaymentsDb } from './db.js';
import type { PayPhases } from './pay.js';
import { settle } from './settle.js';

export interface CompleterDeps {
  readonly db: PaymentsDb;
  readonly phases: PayPhases;
  readonly channelUrl: string;
  readonly leaseMs: number;
  /** Submitted payments older than this without a PAID order are queried at the channel. */
  readonly queryAfterMs: number;
  readonly onError: (error: unknown) => void;
}

export function paymentsCompleter(deps: CompleterDeps) {
  const { db } = deps;
  const { t } = db;
  const stats = { resumed: 0, queried: 0, settledByQuery: 0 };
  const records = completer({
    store: db.store as TransactionalStore & AbandonedRecords,
    phases: deps.phases,
    // What the route answers with the same result, so a replay cannot tell who finished it.
    response: (result) => ({ status: 202, body: result }),
    leaseMs: deps.leaseMs,
    onError: (error) => deps.onError(error),
  });

  async function lostNotifications(): Promise<void> {
    const stale = await db.sql.query<{ order_id: string; channel_key: string; amount: number }>(
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
      if ((await settle(db.sql, t, { txnId: charge.txnId, orderId: row.order_id, amount: Number(row.amount) })) === 'applied') stats.settledByQuery++;
    }
  }

  let running = false;
  return {
    stats,
    /** One pass; a call while one runs is skipped. */
    async run(): Promise<void> {
      if (running) return;
      running = true;
      try {
        stats.resumed += (await records.runOnce()).completed.length;
        await lostNotifications();
      } catch (error) {
        deps.onError(error);
      } finally {
        running = false;
      }
    },
  };
}
