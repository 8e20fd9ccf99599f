/**
 * Registers the model-based test of one store: fast-check generates sequences of commands
 * (commands.ts), runs each against a fresh store and the reference model, and on a failure
 * shrinks the sequence and prints it with the seed and path that replay it.
 *
 *   IDEMKIT_MODEL_RUNS=2000 IDEMKIT_MODEL_COMMANDS=60 npx vitest run test/stores/model   # a long run
 *   IDEMKIT_MODEL_SEED=… IDEMKIT_MODEL_PATH=… npx vitest run test/stores/model/memory.test.ts  # a replay
 */
import fc from 'fast-check';
import { it } from 'vitest';
import type { Real } from './commands.js';
import { reached, storeCommands } from './commands.js';
import type { ModelHarness } from './harness.js';
import { StoreModel } from './model.js';

function envInteger(name: string): number | undefined {
  const value = process.env[name];
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new Error(`${name} must be an integer, got ${JSON.stringify(value)}`);
  return n;
}

export interface ModelRunOptions {
  /** Runs when IDEMKIT_MODEL_RUNS is not set: small, so that CI spends seconds per store. */
  readonly runs: number;
  /** Commands per run at most, unless IDEMKIT_MODEL_COMMANDS says otherwise. @default 30 */
  readonly maxCommands?: number;
}

export function itMatchesTheModel(name: string, harness: () => Promise<ModelHarness>, options: ModelRunOptions): void {
  const numRuns = envInteger('IDEMKIT_MODEL_RUNS') ?? options.runs;
  const maxCommands = envInteger('IDEMKIT_MODEL_COMMANDS') ?? options.maxCommands ?? 30;
  const seed = envInteger('IDEMKIT_MODEL_SEED');
  const path = process.env.IDEMKIT_MODEL_PATH || undefined;
  const replayPath = process.env.IDEMKIT_MODEL_REPLAY_PATH || undefined;
  it(
    `${name}: ${numRuns} random sequences of up to ${maxCommands} operations answer as the reference model does`,
    async () => {
      reached.clear();
      const h = await harness();
      try {
        const commands = fc.commands(storeCommands(h), { maxCommands, size: 'max', replayPath });
        const property = fc.asyncProperty(commands, async (cmds) => {
          const store = await h.reset();
          const real: Real = { store, harness: h };
          await fc.asyncModelRun(() => ({ model: new StoreModel(store.maxResponseBytes), real }), cmds);
        });
        const details = await fc.check(property, { numRuns, seed, path });
        // Runs discarded because real time ran ahead of the model (a loaded machine) are said out loud.
        if (details.numSkips > 0) console.warn(`${name}: ${details.numSkips} run(s) discarded: commands outlasted a lease the model held live (a loaded machine)`);
        if (process.env.IDEMKIT_MODEL_STATS === '1') console.info(`${name}: outcomes reached`, Object.fromEntries([...reached].sort()));
        if (details.failed) throw new Error(fc.defaultReportMessage(details), { cause: details.errorInstance });
      } finally {
        await h.close();
      }
    },
    // Long runs on demand: the bound is the run count, never a clock in the test.
    600_000,
  );
}
