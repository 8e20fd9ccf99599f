/**
 * A TCP forwarder on the host side of the store link: the shared services listen on 127.0.0.1
 * only, so the namespace reaches them through this, at `host:port`. `delayMs` holds every chunk
 * going to the store for that long before it is sent on (order kept): the stand-in for netem's
 * delay on a kernel without netem, one delay per round trip like netem on the namespace's egress.
 */
import { connect, createServer } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';

export interface Forwarder {
  readonly port: number;
  delayMs: number;
  close(): Promise<void>;
}

export async function startForwarder(host: string, targetPort: number): Promise<Forwarder> {
  const sockets = new Set<Socket>();
  const forwarder = { port: 0, delayMs: 0, close };
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
    // Each chunk leaves once its delay is over, in arrival order (also when the delay changes).
    const queue: Array<{ due: number; chunk: Buffer }> = [];
    let timer: NodeJS.Timeout | undefined;
    const pump = () => {
      timer = undefined;
      while (queue.length > 0 && queue[0]!.due <= Date.now()) {
        const { chunk } = queue.shift()!;
        if (upstream.writable) upstream.write(chunk);
      }
      if (queue.length > 0) timer = setTimeout(pump, queue[0]!.due - Date.now());
    };
    client.on('data', (chunk: Buffer) => {
      queue.push({ due: Date.now() + forwarder.delayMs, chunk });
      if (timer === undefined) pump();
    });
    upstream.pipe(client);
  });
  function close(): Promise<void> {
    for (const socket of sockets) socket.destroy();
    return new Promise((resolve) => server.close(() => resolve()));
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, resolve);
  });
  forwarder.port = (server.address() as AddressInfo).port;
  return forwarder;
}
