/**
 * The simulated payment channel on its own, for running the service by hand:
 *
 *   node --conditions=idemkit-source --import tsx examples/payments/channel-server.ts      # port 4000
 *   PORT=3000 CHANNEL_URL=http://127.0.0.1:4000 node --conditions=idemkit-source --import tsx examples/payments/server.ts
 *
 * CHANNEL_PORT, WEBHOOK_SECRET (the same as the service's), SEED. Late notification copies are
 * sent 5 s after each charge here (the demo releases them after shipping instead).
 */
import { startChannel } from './channel.js';

const channel = await startChannel({
  seed: process.env.SEED ?? 'payments',
  secret: process.env.WEBHOOK_SECRET ?? 'whsec_ZGVtby1zZWNyZXQtZG8tbm90LXVzZQ==',
  port: Number(process.env.CHANNEL_PORT ?? 4000),
});
setInterval(() => channel.releaseLate(), 5_000);
console.log(`payment channel listening on ${channel.url}`);
process.once('SIGINT', () => void channel.close().then(() => process.exit(0)));
process.once('SIGTERM', () => void channel.close().then(() => process.exit(0)));
