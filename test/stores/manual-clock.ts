/** A clock tests move by hand, for stores that take an injected clock. */
export function manualClock(start = Date.UTC(2026, 0, 1)) {
  let t = start;
  return {
    now: () => t,
    advance: async (ms: number) => {
      t += Math.ceil(ms);
    },
  };
}
