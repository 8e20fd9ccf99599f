/**
 * The worker process: serves one implementation's app until the driver kills it. Started by the
 * driver as `node --import tsx bench/recovery/worker.ts` (so its pid is the server's own, and a
 * SIGKILL by pid stops the server and nothing else), with RECOVERY_APP (`idemkit` or `dbos`) and
 * RECOVERY_CONFIG (the AppConfig as JSON). Prints `ready` once the app serves.
 */
import process from 'node:process';
import type { AppConfig, StartApp } from './app.js';

const APPS: Record<string, () => Promise<{ start: StartApp<never> }>> = {
  idemkit: () => import('./app-idemkit.js'),
  dbos: () => import('./app-dbos.js'),
};

const load = APPS[process.env.RECOVERY_APP ?? ''];
if (!load) throw new Error(`RECOVERY_APP must be one of ${Object.keys(APPS).join(', ')}`);
const config = JSON.parse(process.env.RECOVERY_CONFIG ?? '') as AppConfig<never>;
const { start } = await load();
await start(config);
process.stdout.write('ready\n');
