/**
 * Real services for the suites that need them. Under CI=true an unreachable service fails the run;
 * elsewhere its suites are skipped with a loud line naming the service and how to start it.
 */
import { Socket } from 'node:net';

export interface Service {
  readonly name: string;
  readonly host: string;
  readonly port: number;
  /** The command that starts it on this machine kind. */
  readonly start: string;
}

export const POSTGRES: Service = {
  name: 'PostgreSQL',
  host: '127.0.0.1',
  port: 5432,
  start: 'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start',
};
export const MARIADB: Service = {
  name: 'MariaDB',
  host: '127.0.0.1',
  port: 3306,
  start: 'start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd',
};
export const REDIS: Service = {
  name: 'Redis',
  host: '127.0.0.1',
  port: 6379,
  start: 'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no',
};
export const RABBITMQ: Service = { name: 'RabbitMQ', host: '127.0.0.1', port: 5672, start: 'rabbitmq-server -detached' };
export const NATS: Service = {
  name: 'NATS',
  host: '127.0.0.1',
  port: 4222,
  start: 'start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server',
};

function reachable(service: Service, timeoutMs = 1500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('error', () => done(false));
    socket.connect(service.port, service.host, () => done(true));
  });
}

/**
 * True when the service answers. Use with `describe.skipIf(!(await requireService(POSTGRES)))`.
 */
export async function requireService(service: Service): Promise<boolean> {
  if (await reachable(service)) return true;
  const line = `${service.name} is not reachable on ${service.host}:${service.port}. Start it with: ${service.start}`;
  if (process.env.CI === 'true') throw new Error(`CI=true and ${line}`);
  console.warn(`\n!!!!!!!! SKIPPING ${service.name} SUITES: ${line}\n`);
  return false;
}
