import { once } from 'node:events';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';

/** A port nobody listens on right now (the OS picks it). */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * How a server says the port it was given is taken. redis-server, nginx, HAProxy, workerd and
 * PostgreSQL's log all print "Address already in use" (the OS's text for EADDRINUSE); Node prints
 * "listen EADDRINUSE: address already in use".
 */
const PORT_TAKEN = /address already in use|EADDRINUSE/i;

const PORT_ATTEMPTS = 5;

/**
 * Runs `start`, which takes its port(s) from freePort() and starts a server on them, again while it
 * fails because a port was taken: a free port is only free until someone binds it, and between
 * freePort() and the server's bind another worker's server (or an outgoing connection's ephemeral
 * port) may take it. `start` must put the server's output in the error's message. Any other
 * failure, or the last attempt's, is thrown as it was.
 */
export async function retryOnPortTaken<T>(start: () => Promise<T>, attempts = PORT_ATTEMPTS): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start();
    } catch (error) {
      const taken = error instanceof Error && PORT_TAKEN.test(error.message);
      if (!taken || attempt >= attempts) throw error;
    }
  }
}

/**
 * True when process `pid` itself has a socket listening on 127.0.0.1:`port` (Linux, from /proc). A
 * server started on a free port is up when this says so; a connection (or a PING) cannot tell it
 * from another process that took the port first, while the one started on it is still failing.
 */
export function listensOn(pid: number, port: number): boolean {
  const local = `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  const sockets = new Set(
    readFileSync('/proc/net/tcp', 'utf8')
      .split('\n')
      .slice(1)
      .map((line) => line.trim().split(/\s+/))
      // local_address, st (0A: LISTEN), inode
      .filter((fields) => fields[1] === local && fields[3] === '0A')
      .map((fields) => `socket:[${fields[9]}]`),
  );
  if (sockets.size === 0) return false;
  try {
    return readdirSync(`/proc/${pid}/fd`).some((fd) => {
      try {
        return sockets.has(readlinkSync(`/proc/${pid}/fd/${fd}`));
      } catch {
        return false; // closed meanwhile
      }
    });
  } catch {
    return false; // the process is gone
  }
}
