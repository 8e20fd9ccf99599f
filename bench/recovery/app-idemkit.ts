/**
 * The seeds' two-phase payment with idemkit: a local write recording the order, a charge at the
 * foreign payment service, a local write recording the charge, as `definePhases` on a Fastify
 * route with the PostgreSQL store, and a completer that finishes what a dead process left.
 * The bench counts this file's lines (blank lines and comments excluded) as user code.
 */
import Fastify from 'fastify';
import pg from 'pg';
import { startInstance } from 'idemkit';
import { idempotency } from 'idemkit/fastify';
import { completer, definePhases } from 'idemkit/patterns';
import { postgresStore } from 'idemkit/stores/postgres';
import type { AppConfig, IdemkitOptions, Order } from './app.js';

export async function start({ port, databaseUrl, foreignUrl, ordersTable, stateName, options }: AppConfig<IdemkitOptions>): Promise<void> {
  const store = postgresStore({ pool: new pg.Pool({ connectionString: databaseUrl }), table: stateName });
  await store.migrate();
  // Instance-aware take-over (one variant): this slot's identity, so a restart frees what its crashed predecessor left in flight.
  const instance = options.instance === undefined ? undefined : await startInstance({ store, name: options.instance });

  const checkout = definePhases<Order, pg.PoolClient>('checkout')
    .phase('order_created', async ({ tx, input }) => {
      await tx.query(`INSERT INTO ${ordersTable} (order_id, amount) VALUES ($1, $2)`, [input.orderId, input.amount]);
      return null;
    })
    .foreign('charged', async ({ foreignKey, input }) => {
      // The payment service deduplicates on the key: a resumed phase sends the same one.
      const response = await fetch(`${foreignUrl}/charges`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': foreignKey },
        body: JSON.stringify(input),
      });
      if (!response.ok) throw new Error(`charge failed: ${response.status}`);
      return (await response.json()) as { id: string };
    })
    .phase('order_charged', async ({ tx, input, data }) => {
      await tx.query(`UPDATE ${ordersTable} SET charge_id = $1, charged = charged + 1, charged_at = clock_timestamp() WHERE order_id = $2`, [data.charged.id, input.orderId]);
      return { orderId: input.orderId, chargeId: data.charged.id };
    });

  const app = Fastify();
  await app.register(idempotency, { store, leaseMs: options.leaseMs, instance });
  app.post('/orders', async (request, reply) => reply.code(201).send(await checkout.run(request.idempotency!, request.body as Order)));

  // Finishes records whose owner died, without waiting for their clients to come back.
  const finisher = completer({ store, instance, phases: checkout, leaseMs: options.leaseMs, response: (result) => ({ status: 201, body: result }) });
  finisher.start({ intervalMs: 1_000 });

  await app.listen({ port, host: '127.0.0.1' });
}
