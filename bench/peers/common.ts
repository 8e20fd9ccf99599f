/** Listening helpers the peer servers share. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type express from 'express';
import type { FastifyInstance } from 'fastify';

export async function listenExpress(app: express.Express): Promise<number> {
  const server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

export async function listenFastify(app: FastifyInstance): Promise<number> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  return (app.server.address() as AddressInfo).port;
}

/**
 * Express's default error handler prints every error's stack in development: a peer that answers
 * 409 through `next(error)` would flood the bench's stderr. This one only answers.
 */
export const quietErrors: express.ErrorRequestHandler = (error: unknown, _req, res, _next) => {
  const status = res.statusCode >= 400 ? res.statusCode : 500;
  res.status(status).json({ error: error instanceof Error ? error.message : String(error) });
};
