/**
 * A seeded PRNG, so `--seed S` replays the same decisions (which responses the gateway loses, how
 * many times a message is delivered, which charges time out). Decisions are drawn from a hash of
 * (seed, subject), not from one shared sequence: concurrency changes the order in which requests
 * arrive, and a shared sequence would then hand out different numbers to the same request.
 */
import { createHash } from 'node:crypto';

/** A uniform float in [0, 1) determined by the seed and the subject. */
export function chance(seed: string, ...subject: Array<string | number>): number {
  const digest = createHash('sha256').update(`${seed}\u0000${subject.join('\u0000')}`).digest();
  return digest.readUInt32BE(0) / 0x1_0000_0000;
}

/** An integer in [min, max], determined by the seed and the subject. */
export function pick(seed: string, min: number, max: number, ...subject: Array<string | number>): number {
  return min + Math.floor(chance(seed, ...subject) * (max - min + 1));
}

/** A stable id-like hex string for the subject (deterministic ids under a seed). */
export function hexId(seed: string, bytes: number, ...subject: Array<string | number>): string {
  return createHash('sha256').update(`${seed}\u0000id\u0000${subject.join('\u0000')}`).digest('hex').slice(0, bytes * 2);
}

/** Fisher–Yates with hash-derived draws: the same seed shuffles the same list the same way. */
export function shuffle<T>(items: readonly T[], seed: string, ...subject: Array<string | number>): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(chance(seed, ...subject, 'shuffle', i) * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
