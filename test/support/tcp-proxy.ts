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
  /** Freezes the open connections for good (silently dead), while new ones still go through. */
  freezeOpen(): void;
  resume(): void;
  close(): Promise<void>;
}

/** `listenPort` reopens a proxy on the port a closed one had (0: any free port). */
export async function startTcpProxy(targetPort: number, options: { listenPort?: number } = {}): Promise<TcpProxy> {
  const pairs = new Set<[Socket, Socket]>();
  let paused = false;
  const frozen: Array<[Socket, Socket]> = [];
  const server: Server = createServer((client) => {
    if (paused) return void client.destroy();
    const upstream = connect(targetPort, '127.0.0.1');
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
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.listenPort ?? 0, '127.0.0.1', resolve);
  });
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
    freezeOpen() {
      for (const [a, b] of pairs) {
        a.unpipe();
        b.unpipe();
        a.pause();
        b.pause();
      }
      frozen.push(...pairs);
      pairs.clear();
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
      for (const [a, b] of frozen.splice(0)) {
        a.destroy();
        b.destroy();
      }
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
