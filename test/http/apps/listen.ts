import type { Server } from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import type { TestApp } from '../harness.js';

/** Serves a fetch handler on an ephemeral loopback port. */
export function listenFetch(fetch: (request: Request) => Response | Promise<Response>): Promise<TestApp> {
  return listenServer(createAdaptorServer({ fetch }) as Server);
}

export function listenServer(server: Server): Promise<TestApp> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') return reject(new Error('no port'));
      resolve({
        url: `http://127.0.0.1:${address.port}`,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections?.();
            server.close(() => done());
          }),
      });
    });
  });
}
