/**
 * The seeds' two-phase payment with DBOS Transact 4.27.6: a workflow of a knex transaction
 * recording the order, a step charging the foreign payment service, a knex transaction recording
 * the charge, started under the client's Idempotency-Key as its workflow ID from a Fastify route.
 * DBOS.launch() recovers the workflows a dead process of this executor left pending.
 * The bench counts this file's lines (blank lines and comments excluded) as user code.
 */
import { DBOS } from '@dbos-inc/dbos-sdk';
import { KnexDataSource } from '@dbos-inc/knex-datasource';
import Fastify from 'fastify';
import type { AppConfig, Order } from './app.js';

export async function start({ port, databaseUrl, foreignUrl, ordersTable, stateName }: AppConfig): Promise<void> {
  const db = new KnexDataSource('app', { client: 'pg', connection: databaseUrl });

  const checkout = DBOS.registerWorkflow(async (order: Order) => {
    await db.runTransaction(async () => {
      await KnexDataSource.client(ordersTable).insert({ order_id: order.orderId, amount: order.amount });
    }, { name: 'orderCreated' });
    const charge = await DBOS.runStep(async () => {
      // A step re-runs if the process dies before its checkpoint: the payment service deduplicates
      // on a key that is the same for every attempt.
      const response = await fetch(`${foreignUrl}/charges`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': `${DBOS.workflowID}:charge` },
        body: JSON.stringify(order),
      });
      if (!response.ok) throw new Error(`charge failed: ${response.status}`);
      return (await response.json()) as { id: string };
    }, { name: 'charge' });
    await db.runTransaction(async () => {
      const client = KnexDataSource.client;
      await client(ordersTable).where({ order_id: order.orderId }).update({ charge_id: charge.id, charged: client.raw('charged + 1'), charged_at: client.raw('clock_timestamp()') });
    }, { name: 'orderCharged' });
    return { orderId: order.orderId, chargeId: charge.id };
  }, { name: 'checkout' });

  DBOS.setConfig({ name: 'recovery-bench', systemDatabaseUrl: databaseUrl, systemDatabaseSchemaName: stateName, logLevel: 'error' });
  await DBOS.launch();

  const app = Fastify();
  app.post('/orders', async (request, reply) => {
    const workflowID = request.headers['idempotency-key'] as string;
    const handle = await DBOS.startWorkflow(checkout, { workflowID })(request.body as Order);
    return reply.code(201).send(await handle.getResult());
  });
  await app.listen({ port, host: '127.0.0.1' });
}
