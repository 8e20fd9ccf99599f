import { describe, expect, it } from 'vitest';
import type { FloorResults } from '../../bench/floors-report.js';
import { FLOORS_END, FLOORS_START, floorTargets, floorsSection, keepSections, markedSections, ratios, replaceSection, spreadOf, templateOf } from '../../bench/floors-report.js';

describe('bench floors: a captured statement sent again with fresh values', () => {
  const marks = { key: 'k-captured', token: 'a'.repeat(32), time: 1_796_626_422_757 };
  const fresh = { key: 'k-fresh', token: 'b'.repeat(32), timeShift: 5_000 };

  it('replaces the key and the token, and moves the times by the time since the capture', () => {
    const values = ['', 'k-captured', 'v2:fingerprint', 'a'.repeat(32), 30_000, 86_400_000];
    expect(templateOf(values, marks)(fresh)).toEqual(['', 'k-fresh', 'v2:fingerprint', 'b'.repeat(32), 30_000, 86_400_000]);
    const named = { scope: '', key: 'k-captured', token: 'a'.repeat(32), now: marks.time, until: marks.time + 30_000, lease: 30_000 };
    expect(templateOf(named, marks)(fresh)).toEqual({ scope: '', key: 'k-fresh', token: 'b'.repeat(32), now: marks.time + 5_000, until: marks.time + 35_000, lease: 30_000 });
  });

  it('keeps a body Buffer as the same object, and other values as they were', () => {
    const body = Buffer.from('{"ok":true}');
    const out = templateOf([body, null, true, 201, 'k-captured-not', [1.5]], marks)(fresh) as unknown[];
    expect(out[0]).toBe(body);
    expect(out.slice(1)).toEqual([null, true, 201, 'k-captured-not', [1.5]]);
  });

  it('leaves a token-shaped string alone when no token was seen (a replay makes one it does not return)', () => {
    expect(templateOf(['a'.repeat(32)], { key: 'x', time: marks.time })(fresh)).toEqual(['a'.repeat(32)]);
  });

  it('builds new values for every request: nothing is shared between two of them', () => {
    const build = templateOf({ key: 'k-captured' }, marks);
    const one = build(fresh);
    const two = build({ ...fresh, key: 'k-other' });
    expect(one).not.toBe(two);
    expect(one).toEqual({ key: 'k-fresh' });
    expect(two).toEqual({ key: 'k-other' });
  });
});

describe('bench floors: figures and targets', () => {
  it('takes the ratio per repetition, and its median with the lowest and highest', () => {
    expect(ratios([90, 100, 80], [100, 100, 100])).toEqual([0.9, 1, 0.8]);
    expect(spreadOf([0.9, 1, 0.8])).toEqual({ median: 0.9, min: 0.8, max: 1 });
    expect(() => ratios([1], [1, 2])).toThrow(/1 against 2/);
  });

  const results = (pgStore: number[], pgRaw: number[], inServer?: number[]): FloorResults => ({
    date: '2026-12-07T07:00:00.000Z',
    node: 'v20.20.2',
    commit: 'abc1234, src sha256 0',
    command: 'npm run bench:floors',
    repetitions: pgStore.length,
    postgres: {
      concurrency: 50,
      poolMax: 10,
      durationSec: 2,
      warmupSec: 1,
      captured: [{ workload: 'new-key', text: 'SELECT * FROM t_claim($1)', values: '["k"]' }],
      workloads: [
        {
          workload: 'new-key',
          statements: 2,
          storeRps: pgStore,
          rawRps: pgRaw,
          storeCpuMicros: pgStore.map(() => 30),
          rawCpuMicros: pgRaw.map(() => 25),
          storeServerMicros: pgStore.map(() => 70),
          rawServerMicros: pgRaw.map(() => 70),
        },
      ],
    },
    sqlite: {
      iterations: 1000,
      framework: 'fastify',
      captured: [],
      workloads: [{ workload: 'new-key', statements: 3, storeMicros: [12, 12], rawMicros: [10, 10], storeCpuMicros: [13, 13], rawCpuMicros: [10, 10], inServerMicros: inServer }],
    },
  });

  it('passes PostgreSQL at 0.9 of the raw loop and fails it below, on the median of the ratios', () => {
    const [pass] = floorTargets(results([900, 950, 880], [1000, 1000, 1000]));
    expect(pass).toMatchObject({ ok: true });
    expect(pass!.text).toContain('0.90 (0.88–0.95)');
    expect(pass!.text).toContain('50 in flight');
    // (25 + 70) ÷ (30 + 70): what the store's own client work costs where CPU is the limit.
    expect(pass!.text).toContain('CPU-bound ratio 0.95 (0.95–0.95)');
    expect(floorTargets(results([890, 950, 880], [1000, 1000, 1000]))[0]).toMatchObject({ ok: false });
  });

  it('holds SQLite to 1.2 × the raw loop, in the server and in-process CPU time', () => {
    const lines = floorTargets(results([1], [1], [12, 13]));
    expect(lines.map((l) => l.ok)).toEqual([true, false, false]);
    expect(lines[1]!.text).toContain('inside the server');
    expect(lines[2]!.text).toContain('1.30 (1.30–1.30)');
    // Without a server run, only the in-process line.
    expect(floorTargets(results([1], [1])).length).toBe(2);
  });

  it('writes its section between its markers, with each target', () => {
    const section = floorsSection(results([950], [1000], [11]));
    expect(section.startsWith(FLOORS_START)).toBe(true);
    expect(section.endsWith(FLOORS_END)).toBe(true);
    expect(section).toContain('- **PASS** PostgreSQL, new key');
    expect(section).toContain('| new-key | 2 | 950 | 1,000 | 0.95 (0.95–0.95) | 30.0 | 25.0 | 70.0 | 70.0 | 0.95 (0.95–0.95) |');
  });
});

describe('bench floors: RESULTS.md sections', () => {
  const instructions = '<!-- instructions:start (written by npm run bench:instructions) -->\n## Instructions\nrows\n<!-- instructions:end -->';
  const floors = `${FLOORS_START}\n## Floors\nold\n${FLOORS_END}`;

  it('finds each marked section by name', () => {
    const found = markedSections(`# Report\n\n${instructions}\n\ntext\n\n${floors}\n`);
    expect([...found.keys()]).toEqual(['instructions', 'floors']);
    expect(found.get('instructions')).toBe(instructions);
  });

  it('replaces its own section and leaves the instructions section as it was', () => {
    const text = `# Report\n\n${instructions}\n\n${floors}\n\nafter\n`;
    const next = replaceSection(text, 'floors', `${FLOORS_START}\nnew $& $1\n${FLOORS_END}`);
    expect(next).toContain(instructions);
    expect(next).toContain('new $& $1');
    expect(next).not.toContain('old');
    expect(next.endsWith('after\n')).toBe(true);
  });

  it('appends the section to a report without one', () => {
    expect(replaceSection('# Report\n\n', 'floors', floors)).toBe(`# Report\n\n${floors}\n`);
  });

  it('a report written anew keeps the sections of the one it replaces, unless it has its own', () => {
    const previous = `# Old\n\n${instructions}\n\n${floors}\n`;
    const kept = keepSections(previous, '# New\n');
    expect(kept).toContain('# New');
    expect(kept).not.toContain('# Old');
    expect(markedSections(kept).get('instructions')).toBe(instructions);
    expect(markedSections(kept).get('floors')).toBe(floors);
    const own = `${FLOORS_START}\nthis run\n${FLOORS_END}`;
    expect(markedSections(keepSections(previous, `# New\n\n${own}\n`)).get('floors')).toBe(own);
  });
});
