/** Small test doubles shared by the suites: a gate a test opens, and a logger that keeps its lines. */

/** A promise the test resolves when it chooses: a barrier, not a guessed delay. */
export function latch(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** An IdempotencyLogger that records each line's level and message. */
export function recordingLogger() {
  const lines: Array<{ level: string; message: string }> = [];
  return {
    lines,
    logger: {
      warn: (message: string) => lines.push({ level: 'warn', message }),
      error: (message: string) => lines.push({ level: 'error', message }),
    },
  };
}
