/**
 * Preloaded into the bench server by `npm run bench:instructions` (`--import`, after tsx), so that
 * bench/server.ts runs unchanged: answers two IPC messages from the parent, `gc-start` and
 * `gc-stop`, with what V8's GC did in between (v8.GCProfiler: every collection, with the heap
 * before and after it). The parent asks only before it counts instructions, so the profiler's own
 * work is never counted.
 */
import v8 from 'node:v8';
import type { GcReport } from './instructions-shared.js';

interface GcStatistic {
  readonly gcType: string;
  readonly beforeGC: { readonly heapStatistics: { readonly usedHeapSize: number } };
  readonly afterGC: { readonly heapStatistics: { readonly usedHeapSize: number } };
}

let profiler: v8.GCProfiler | undefined;
let usedAtStart = 0;

process.on('message', (message: { type?: string }) => {
  if (message.type === 'gc-start') {
    profiler = new v8.GCProfiler();
    usedAtStart = v8.getHeapStatistics().used_heap_size;
    profiler.start();
    process.send?.({ type: 'gc-started' });
  } else if (message.type === 'gc-stop' && profiler) {
    const usedAtEnd = v8.getHeapStatistics().used_heap_size;
    const statistics = (profiler.stop() as unknown as { statistics: GcStatistic[] }).statistics;
    profiler = undefined;
    // What the program allocated: the heap's growth between collections (a collection only frees,
    // and promotion moves bytes already counted), plus the growth after the last one.
    let allocatedBytes = 0;
    let used = usedAtStart;
    let scavenges = 0;
    let markCompacts = 0;
    /** Allocated bytes at each scavenge: their differences are what one scavenge takes to come. */
    const atScavenge: number[] = [];
    for (const gc of statistics) {
      allocatedBytes += Math.max(0, gc.beforeGC.heapStatistics.usedHeapSize - used);
      used = gc.afterGC.heapStatistics.usedHeapSize;
      if (gc.gcType === 'Scavenge') {
        scavenges++;
        atScavenge.push(allocatedBytes);
      } else if (gc.gcType === 'MarkSweepCompact') markCompacts++;
    }
    allocatedBytes += Math.max(0, usedAtEnd - used);
    const between = atScavenge.length >= 2 ? (atScavenge.at(-1)! - atScavenge[0]!) / (atScavenge.length - 1) : undefined;
    const newSpace = v8.getHeapSpaceStatistics().find((space) => space.space_name === 'new_space')?.space_size ?? 0;
    const report: GcReport = { type: 'gc', scavenges, markCompacts, allocatedBytes, bytesPerScavenge: between ?? newSpace };
    process.send?.(report);
  }
});
