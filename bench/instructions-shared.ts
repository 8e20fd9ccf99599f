/** What the instruction counter's parts share (bench/instructions*.ts). */
import type { Framework, Impl } from './shared.js';

export type InstrStore = 'memory' | 'sqlite' | 'postgres' | 'redis' | 'redis-node';
export type InstrWorkload = 'new-key' | 'replay';
export const INSTR_FRAMEWORKS: readonly Framework[] = ['fastify', 'express'];
export const INSTR_STORES: readonly InstrStore[] = ['memory', 'sqlite', 'postgres', 'redis', 'redis-node'];
export const INSTR_WORKLOADS: readonly InstrWorkload[] = ['new-key', 'replay'];
/**
 * The implementations counted: the bare framework, idemkit, the one peer with a race-correct record,
 * and `floor`, the Redis round trips alone through ioredis (store `redis` only; bench/server.ts, startFloor).
 */
export type InstrImpl = Extract<Impl, 'bare' | 'idemkit' | 'node-idempotency'> | 'floor';

/** Server → parent (bench/instructions-probe.ts), in answer to `gc-stop`. */
export interface GcReport {
  readonly type: 'gc';
  readonly scavenges: number;
  readonly markCompacts: number;
  /** Bytes the program allocated on V8's heap between `gc-start` and `gc-stop`. */
  readonly allocatedBytes: number;
  /**
   * Bytes allocated from one scavenge to the next (their mean over the window; the young
   * generation's size when fewer than two fell in it).
   */
  readonly bytesPerScavenge: number;
}

/** One server process: its counted window and its GC window. */
export interface InstrRun {
  readonly framework: Framework;
  readonly workload: InstrWorkload;
  readonly impl: InstrImpl;
  /** 'none' for the bare framework. */
  readonly store: InstrStore | 'none';
  /**
   * Instructions of the whole server process (every thread) per request, over the counted windows
   * but those left out as lumps (instructions.ts, LUMP).
   */
  readonly instructionsPerRequest: number;
  /** Of which the main thread's (JavaScript, the event loop); the rest is V8's and libuv's helper threads. */
  readonly mainThreadPerRequest: number;
  /** Over every counted window, lumps included. */
  readonly allWindowsPerRequest: number;
  /** Each counted window's instructions per request, in order. */
  readonly windows: readonly number[];
  /** Windows left out of `instructionsPerRequest`. */
  readonly lumpWindows: number;
  /** Connections the server closed between windows (reopened); 0 normally. */
  readonly reconnects: number;
  /** In the GC window (the end of the warm-up, before counting). */
  readonly allocatedBytesPerRequest: number;
  /**
   * Scavenges per 1,000 requests: the bytes 1,000 requests allocate over the bytes one scavenge
   * takes to come (the young generation being fixed, a count over a few thousand requests would be
   * ±1 scavenge, ±25 %).
   */
  readonly scavengesPer1000: number;
  /** Scavenges and major GCs (mark-compacts) counted in the GC window, and its requests. */
  readonly scavengesCounted: number;
  readonly markCompactsCounted: number;
  readonly gcRequests: number;
  /** Seconds the process took from spawn to exit (under callgrind). */
  readonly seconds: number;
}

export interface InstrResults {
  readonly date: string;
  readonly commit: string;
  readonly srcHash: string;
  readonly node: string;
  readonly valgrind: string;
  readonly cpu: string;
  readonly command: string;
  readonly connections: number;
  readonly warmupRequests: number;
  readonly countedRequests: number;
  readonly runs: readonly InstrRun[];
  readonly versions: Readonly<Record<string, string>>;
}
