import type { Server } from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import type { TestApp } from '../harness.js';

type Fetch = (request: Request) => Response | Promise<Response>;

interface BunServer {
  readonly port: number;
  stop(closeActiveConnections?: boolean): Promise<void> | void;
}
interface DenoServer {
  readonly addr: { readonly port: number };
  shutdown(): Promise<void>;
}
const runtime = globalThis as { Bun?: { serve(o: object): BunServer }; Deno?: { serve(o: object, fetch: Fetch): DenoServer } };

/**
 * Serves a fetch handler on an ephemeral loopback port: with the runtime's own server on Bun
 * (Bun.serve) and Deno (Deno.serve), where Web and Hono apps are served so (issue 31), and with
 * @hono/node-server's on Node.
 */
export function listenFetch(fetch: Fetch): Promise<TestApp> {
  if (runtime.Bun) {
    const server = runtime.Bun.serve({ port: 0, hostname: '127.0.0.1', fetch, idleTimeout: 0 });
    return Promise.resolve({ url: `http://127.0.0.1:${server.port}`, close: async () => void (await server.stop(true)) });
  }
  if (runtime.Deno) {
    const server = runtime.Deno.serve({ port: 0, hostname: '127.0.0.1', onListen: () => {} }, fetch);
    return Promise.resolve({ url: `http://127.0.0.1:${server.addr.port}`, close: () => server.shutdown() });
  }
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
