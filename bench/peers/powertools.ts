/**
 * `@aws-lambda-powertools/idempotency` with its cache persistence layer (`CachePersistenceLayer`
 * over `@redis/client`), `makeIdempotent` wrapped around the same handler function. The event is
 * `{ headers, body }`: the key is the Idempotency-Key header (`eventKeyJmesPath`). Each call gets a
 * Lambda-like context (`getRemainingTimeInMillis`), which is what gives an in-progress record its
 * expiry; without one, a concurrent duplicate sees an "orphan" record and runs the handler again
 * (the race table's `powertools (no-context)` row).
 *
 * Payload validation (`payloadValidationJmesPath: 'body'`, the equivalent of a fingerprint) is off
 * in the timed runs: in 2.35.0 the cache layer's `_updateRecord` drops the payload hash when it
 * marks a record completed, so every replay of a completed key fails validation (422). The race
 * table's `powertools (validation)` row shows it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import { createClient } from '@redis/client';
import express from 'express';
import Fastify from 'fastify';
import { ROUTE } from '../shared.js';
import { listenExpress, listenFastify, quietErrors } from './common.js';
import type { Body, PeerContext, PeerServer } from './types.js';
import { NotApplicable, REPLAYED } from './types.js';

interface Event {
  readonly headers: Record<string, unknown>;
  readonly body: unknown;
}
interface Context {
  getRemainingTimeInMillis(): number;
  executed: boolean;
}
/** The "Lambda" time budget each request claims: the in-progress record's expiry. */
const REMAINING_MS = 30_000;

function statusOf(error: unknown): number {
  const name = error instanceof Error ? error.name : '';
  if (name === 'IdempotencyAlreadyInProgressError') return 409;
  if (name === 'IdempotencyValidationError') return 422;
  if (name === 'IdempotencyKeyError') return 400;
  return 500;
}

export interface PowertoolsOptions {
  /** Pass a Lambda-like context to each call. @default true */
  readonly withContext?: boolean;
  /** Validate the body against the stored record. @default false (see above) */
  readonly validatePayload?: boolean;
}

export async function start(ctx: PeerContext, options: PowertoolsOptions = {}): Promise<PeerServer> {
  if (ctx.store !== 'redis') throw new NotApplicable('measured with its cache (Redis) layer only');
  const withContext = options.withContext ?? true;
  if (!withContext) {
    // Without a context Powertools warns on every call; the point of that variant is the race table.
    const warn = console.warn;
    console.warn = (...args: unknown[]) => {
      if (!String(args[0]).startsWith('Could not determine remaining time left')) warn(...args);
    };
  }
  const client = await createClient({ url: ctx.redisUrl }).connect();
  const run = makeIdempotent(
    async (event: Event, context?: Context): Promise<Body> => {
      if (context) context.executed = true;
      if (ctx.delayMs > 0) await sleep(ctx.delayMs);
      return ctx.execute(event.headers['idempotency-key'] as string | undefined);
    },
    {
      persistenceStore: new CachePersistenceLayer({ client: client as never }),
      config: new IdempotencyConfig({
        eventKeyJmesPath: 'headers."idempotency-key"',
        ...(options.validatePayload ? { payloadValidationJmesPath: 'body' } : {}),
        throwOnNoIdempotencyKey: ctx.required,
      }),
      keyPrefix: `bench-pt-${ctx.nonce}`,
    },
  );
  /** Runs the idempotent function; `replayed` when the handler did not run. */
  async function call(headers: Record<string, unknown>, body: unknown): Promise<{ status: number; body: unknown; replayed: boolean }> {
    const context: Context = { getRemainingTimeInMillis: () => REMAINING_MS, executed: false };
    try {
      const result = withContext ? await run({ headers, body }, context as never) : await run({ headers, body });
      return { status: 201, body: result, replayed: withContext && !context.executed };
    } catch (error) {
      return { status: statusOf(error), body: { error: (error as Error).message }, replayed: false };
    }
  }

  let port: number;
  if (ctx.framework === 'express') {
    const app = express();
    app.post(ROUTE, express.json(), async (req, res) => {
      const answer = await call(req.headers, req.body);
      if (answer.replayed) res.set(REPLAYED, 'true');
      res.status(answer.status).json(answer.body);
    });
    app.use(quietErrors);
    port = await listenExpress(app);
  } else {
    const app = Fastify({ logger: false });
    app.post(ROUTE, async (request, reply) => {
      const answer = await call(request.headers, request.body);
      if (answer.replayed) void reply.header(REPLAYED, 'true');
      return reply.code(answer.status).send(answer.body);
    });
    port = await listenFastify(app);
  }
  return { port, close: async () => void (await client.close()) };
}
