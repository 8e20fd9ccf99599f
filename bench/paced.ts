/**
 * Latency at a fixed request rate (open loop), for the latency targets.
 *
 * Why not autocannon's `overallRate`: it gives each connection a budget per second, and a
 * connection spends it back to back from the start of each second, then idles. At half the maximum
 * rate that is full load for half of every second, so latency would be queueing again. This sends
 * requests on a schedule instead (every millisecond, the requests due by then), over a pool of
 * keep-alive connections, and measures each latency from its scheduled time, so a slow server
 * cannot hide its delay by slowing the sender down (no coordinated omission). Microsecond resolution.
 */
import { Agent, request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ServerHandle } from './harness.js';
import { freshKey, replayKeys } from './harness.js';
import type { Workload } from './shared.js';
import { BODY, CONTENT_TYPE, ROUTE } from './shared.js';

export interface PacedSample {
  readonly targetRate: number;
  readonly achievedRate: number;
  readonly completed: number;
  readonly errors: number;
  readonly non2xx: number;
  /** Microseconds, from the scheduled send time to the end of the response. */
  readonly p50Micros: number;
  readonly p99Micros: number;
}

const BODY_BYTES = Buffer.from(BODY);

export async function runPaced(server: ServerHandle, workload: Workload, rate: number, durationSec: number): Promise<PacedSample> {
  const url = new URL(server.url);
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  const latencies: number[] = [];
  let errors = 0;
  let non2xx = 0;
  let inFlight = 0;
  const start = process.hrtime.bigint();
  let replayIndex = 0;
  const keyFor = (): string | undefined =>
    workload === 'new-key' ? freshKey() : workload === 'replay' ? replayKeys[replayIndex++ % replayKeys.length] : undefined;

  const send = (scheduledNs: number) =>
    new Promise<void>((resolve) => {
      inFlight++;
      const headers: Record<string, string | number> = { 'content-type': CONTENT_TYPE, 'content-length': BODY_BYTES.length };
      const key = keyFor();
      if (key !== undefined) headers['idempotency-key'] = key;
      const req = request({ agent, host: url.hostname, port: url.port, method: 'POST', path: ROUTE, headers }, (res) => {
        res.on('data', () => {});
        res.on('end', () => {
          latencies.push((Number(process.hrtime.bigint() - start) - scheduledNs) / 1e3);
          if (res.statusCode === undefined || res.statusCode < 200 || res.statusCode > 299) non2xx++;
          inFlight--;
          resolve();
        });
      });
      req.on('error', () => {
        errors++;
        inFlight--;
        resolve();
      });
      req.end(BODY_BYTES);
    });

  const pending: Array<Promise<void>> = [];
  const intervalNs = 1e9 / rate;
  const total = Math.round(rate * durationSec);
  let sent = 0;
  while (sent < total) {
    const now = Number(process.hrtime.bigint() - start);
    const due = Math.min(total, Math.floor(now / intervalNs) + 1);
    for (; sent < due; sent++) pending.push(send(Math.round(sent * intervalNs)));
    await sleep(1);
  }
  await Promise.all(pending);
  const elapsedSec = Number(process.hrtime.bigint() - start) / 1e9;
  agent.destroy();
  void inFlight;
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => (latencies.length === 0 ? NaN : latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))]!);
  return {
    targetRate: rate,
    achievedRate: latencies.length / elapsedSec,
    completed: latencies.length,
    errors,
    non2xx,
    p50Micros: pct(0.5),
    p99Micros: pct(0.99),
  };
}
