// Flag values shared by every `idemkit` command (check, and the store commands).

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * A duration in ms, or undefined when `value` is not one: a number with a unit (`500ms`, `10s`,
 * `5m`, `2h`, `1d`), or a bare number in `bare` units (curl's --max-time takes seconds).
 */
export function parseDuration(value: string, bare: keyof typeof UNIT_MS = 's'): number | undefined {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(value.trim());
  if (!match) return undefined;
  return Number(match[1]) * UNIT_MS[(match[2] as keyof typeof UNIT_MS | undefined) ?? bare];
}

/** A whole number written in decimal digits, or undefined. */
export function parseWholeNumber(value: string): number | undefined {
  return /^\d+$/.test(value) && Number.isSafeInteger(Number(value)) ? Number(value) : undefined;
}

/** A duration for people: 950ms, 42s, 5m 3s, 2h 10m, 3d 4h. */
export function formatDuration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs < 1_000) return `${Math.round(abs)}ms`;
  const s = Math.floor(abs / 1_000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 ? `${m}m ${s % 60}s` : `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 24) return m % 60 ? `${h}h ${m % 60}m` : `${h}h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d}d ${h % 24}h` : `${d}d`;
}
