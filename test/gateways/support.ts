/** What the gateway suites share: whether a gateway binary is installed. */
import { spawnSync } from 'node:child_process';

/** True when `bin` runs; under CI=true a missing gateway fails the run instead of skipping its suite. */
export function gatewayAvailable(bin: string, apt: string): boolean {
  if (spawnSync(bin, ['-v'], { stdio: 'ignore' }).status === 0) return true;
  const line = `${bin} is not on PATH (apt-get install ${apt})`;
  if (process.env.CI === 'true') throw new Error(`CI=true and ${line}`);
  console.warn(`\n!!!!!!!! SKIPPING THE ${bin.toUpperCase()} GATEWAY SUITE: ${line}\n`);
  return false;
}
