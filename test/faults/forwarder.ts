/**
 * A TCP forwarder on the host side of the store link: the shared services listen on 127.0.0.1
 * only, so the namespace reaches them through this, at `host:port`. It adds nothing of its own:
 * delay and loss are the store link's (test/faults/tun-shaper.py), below TCP.
 */
import { connect, createServer } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';

export interface Forwarder {
  readonly port: number;
  close(): Promise<void>;
}

export async function startForwarder(host: string, targetPort: number): Promise<Forwarder> {
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => drop());
      socket.on('close', () => drop());
    }
    function drop() {
      for (const socket of [client, upstream]) {
        sockets.delete(socket);
        socket.destroy();
      }
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, resolve);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
