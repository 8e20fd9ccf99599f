/**
 * The record protocol, model-checked: spec/record.pml through spin (docs/model.md). Each case
 * generates the verifier (`spin -a`), compiles it with gcc in a temp directory of its own, runs it
 * exhaustively, and reads its report: the real model must show no error and say how many states
 * it explored; each broken variant must fail, and the replay of its counterexample must end on the
 * assertion that names the broken guarantee.
 *
 * CI runs reduced fault budgets so the whole file stays short on two loaded cores;
 * IDEMKIT_MODEL_FULL=1 runs every case with the model's full bounds (minutes; docs/model.md has
 * the numbers).
 */
import { execFile, spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const MODEL = join(import.meta.dirname, '..', '..', 'spec', 'record.pml');
const FULL = process.env.IDEMKIT_MODEL_FULL === '1';

function haveTool(tool: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' }).status === 0;
}

function requireSpin(): boolean {
  if (haveTool('spin') && haveTool('gcc')) return true;
  const line = 'spin (or gcc) is not on PATH. Install it with: apt-get install -y spin gcc';
  if (process.env.CI === 'true') throw new Error(`CI=true and ${line}`);
  console.warn(`\n!!!!!!!! SKIPPING THE MODEL CHECKS (spec/record.pml): ${line}\n`);
  return false;
}

interface Case {
  readonly name: string;
  /** The model's switches (spin -D…). */
  readonly model: readonly string[];
  /** Bounds lowered for CI; dropped under IDEMKIT_MODEL_FULL=1. */
  readonly reduced?: readonly string[];
  readonly liveness?: boolean;
  /** For a broken variant: the assertion its counterexample must end on. */
  readonly fails?: string;
}

const CASES: readonly Case[] = [
  { name: 'transactional mode: safety', model: ['-DTX=1'] },
  { name: 'non-transactional store: safety', model: ['-DTX=0'], reduced: ['-DMAXWIN=1'] },
  { name: 'transactional mode: every retrying client gets an answer (weak fairness)', model: ['-DTX=1'], reduced: ['-DMAXWIN=1'], liveness: true },
  {
    name: 'non-transactional store: every retrying client gets an answer (weak fairness)',
    model: ['-DTX=0'],
    reduced: ['-DMAXCRASH=1', '-DMAXWIN=1'],
    liveness: true,
  },
  { name: 'BROKEN_FENCE, transactional: a stale owner commits', model: ['-DTX=1', '-DBROKEN_FENCE'], fails: 'owner==(me+1)' },
  { name: 'BROKEN_FENCE, non-transactional: a stale owner completes', model: ['-DTX=0', '-DBROKEN_FENCE'], fails: 'owner==(me+1)' },
  {
    name: 'BROKEN_LATE: releasing a late take-over re-runs a committed phase',
    model: ['-DTX=0', '-DBROKEN_LATE'],
    reduced: ['-DMAXWIN=1'],
    fails: 'phases[w]<=1',
  },
  { name: 'BROKEN_RESTART: a restart that ends a live owner’s lease', model: ['-DTX=0', '-DBROKEN_RESTART'], reduced: ['-DMAXWIN=1'], fails: 'ownerGone' },
];

interface Report {
  readonly errors: number;
  readonly states: number;
  readonly transitions: number;
  readonly text: string;
}

function parse(text: string): Report {
  const errors = /errors: (\d+)/.exec(text);
  const states = /(\d+) states, stored/.exec(text);
  const transitions = /(\d+) transitions/.exec(text);
  if (!errors || !states || !transitions) throw new Error(`pan's report has no error or state count:\n${text}`);
  return { errors: Number(errors[1]), states: Number(states[1]), transitions: Number(transitions[1]), text };
}

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** spin -a, gcc, pan: in a directory of its own (the cases and other files run concurrently). */
async function verify(c: Case): Promise<{ report: Report; dir: string; defines: string[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-model-'));
  dirs.push(dir);
  copyFileSync(MODEL, join(dir, 'record.pml'));
  const defines = [...c.model, ...(FULL ? [] : (c.reduced ?? []))];
  await run('spin', [...defines, '-a', 'record.pml'], { cwd: dir });
  // Safety: assertions and end states, no never claim. Liveness: the `live` claim, acceptance cycles.
  // Weak fairness over the model's 7 processes (the clock, the reaper, the requests, the restart, the claim) needs NFAIR=3.
  const cc = c.liveness ? ['-DNFAIR=3'] : ['-DSAFETY', '-DNOCLAIM'];
  // A broken variant fails within a few thousand states: compiling fast beats running fast there.
  await run('gcc', [c.fails === undefined ? '-O1' : '-O0', '-w', ...cc, '-o', 'pan', 'pan.c'], { cwd: dir });
  const args = c.liveness ? ['-a', '-f', '-N', 'live'] : [];
  // -m: the search depth (the model's deepest path is a few hundred steps); -w: 2^22 hash slots.
  const { stdout } = await run('./pan', [...args, '-m10000', '-w22'], { cwd: dir, maxBuffer: 16 * 1024 * 1024 }).catch(
    (error: { stdout?: string }) => ({ stdout: error.stdout ?? '' }),
  );
  return { report: parse(stdout), dir, defines };
}

// Each case is a gcc and a pan process of its own: they run side by side.
describe.skipIf(!requireSpin())('the record protocol, model-checked with spin (spec/record.pml)', () => {
  for (const c of CASES) {
    it.concurrent(c.name, { timeout: 300_000 }, async () => {
      const { report, dir, defines } = await verify(c);
      console.log(`spin ${defines.join(' ')}${c.liveness ? ' (live, -a -f)' : ''}: ${report.states} states, ${report.transitions} transitions, errors: ${report.errors}`);
      expect(report.states).toBeGreaterThan(0);
      if (c.fails === undefined) {
        expect(report.errors, report.text).toBe(0);
        // Exhaustive: neither cut by the depth bound nor by memory.
        expect(report.text).not.toMatch(/max search depth too small|Search not completed|out of memory/);
        return;
      }
      expect(report.errors).toBeGreaterThan(0);
      // Replay the counterexample: it ends on the assertion that names the broken guarantee.
      const { stdout } = await run('spin', [...defines, '-t', 'record.pml'], { cwd: dir, maxBuffer: 16 * 1024 * 1024 });
      expect(stdout).toContain(`assertion violated`);
      expect(stdout).toContain(c.fails);
      const story = stdout
        .split('\n')
        .filter((line) => line.includes('MSC:') || line.includes('assert'))
        .map((line) => line.trim());
      console.log(`counterexample (${c.name}):\n  ${story.join('\n  ')}`);
    });
  }
});
