/**
 * A server process for the ORM bridge tests. Environment: COMBO (e.g. kysely-postgres), NAME (table
 * suffix), SQLITE_FILE, LEASE_MS. `POST /work` inserts one order through the ORM's transaction
 * (`ctx.tx`) in transactional mode. `x-fail: throw` makes the handler throw after its write;
 * `x-crash: after-insert` SIGKILLs the process right after the write, before commit or completion.
 */
import { withIdempotency } from '../../src/http/web.js';
import { listenFetch } from '../http/apps/listen.js';
import type { Combo } from './backends.js';
import { openOrm } from './backends.js';

const env = process.env;
const backend = await openOrm(env.COMBO as Combo, env.NAME!, env.SQLITE_FILE!);

const handler = withIdempotency(
  async (request, ctx) => {
    await backend.insertOrder(ctx!.tx, ctx!.key);
    if (request.headers.get('x-crash') === 'after-insert') process.kill(process.pid, 'SIGKILL');
    if (request.headers.get('x-fail') === 'throw') throw new Error('the handler failed after its write');
    return Response.json({ key: ctx!.key, pid: process.pid }, { status: 201 });
  },
  { store: backend.store, transactional: true, leaseMs: Number(env.LEASE_MS ?? 30_000), scope: () => 'orm' },
);
const app = await listenFetch(handler);
console.log(`listening ${new URL(app.url).port}`);
