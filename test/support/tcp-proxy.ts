/**
 * A TCP proxy between a client and a shared service, so fault tests can cut or freeze the
 * connection without touching the service other suites use.
 */
import { createServer, connect } from 'node:net';
import type { AddressInfo, Server, Socket } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  /** Destroys every open connection; new ones still go through. */
  cut(): void;
  /** Stops forwarding: open connections freeze, new ones are refused until `resume`. */
  pause(): void;
  resume(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const pairs = new Set<[Socket, Socket]>();
  let paused = false;
  const server: Server = createServer((client) => {
    if (paused) return void client.destroy();
    const upstream = connect(targetPort, targetHost);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    client.pipe(upstream);
    upstream.pipe(client);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const cut = () => {
    for (const [a, b] of pairs) {
      a.destroy();
      b.destroy();
    }
    pairs.clear();
  };
  return {
    port: (server.address() as AddressInfo).port,
    cut,
    pause() {
      paused = true;
      for (const [a, b] of pairs) {
        a.pause();
        b.pause();
        a.unpipe();
        b.unpipe();
      }
    },
    resume() {
      paused = false;
      for (const [a, b] of pairs) {
        a.pipe(b);
        b.pipe(a);
        a.resume();
        b.resume();
      }
    },
    close() {
      cut();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
