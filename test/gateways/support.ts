/** What the gateway suites share: whether a gateway binary is installed, and a spare port. */
import { spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';

/** True when `bin` runs; under CI=true a missing gateway fails the run instead of skipping its suite. */
export function gatewayAvailable(bin: string, apt: string): boolean {
  if (spawnSync(bin, ['-v'], { stdio: 'ignore' }).status === 0) return true;
  const line = `${bin} is not on PATH (apt-get install ${apt})`;
  if (process.env.CI === 'true') throw new Error(`CI=true and ${line}`);
  console.warn(`\n!!!!!!!! SKIPPING THE ${bin.toUpperCase()} GATEWAY SUITE: ${line}\n`);
  return false;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}
