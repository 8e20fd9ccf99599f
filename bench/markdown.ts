/**
 * bench/RESULTS.md, the one report of an `npm run bench` run: every figure against the bare
 * framework measured in the same run, then idemkit's own overhead in detail.
 */
import type { BenchResults, ConfigResult, RaceEntry, Row, Subject } from './results.js';
import { BUSY_PERCENT, WORKLOAD_TITLE, addedMicros, addedOver, baselineOf, busyPercent, fixed, int, isSaturated, raceCorrect, ratioOver, signed } from './results.js';
import type { Framework, Impl, StoreKind, Workload } from './shared.js';

/** A latency in ms as autocannon gives it (whole ms), or n/a. */
const ms = (n: number) => (Number.isFinite(n) ? `${n}` : 'n/a');

type NotApplicableFn = (impl: Impl, framework: Framework, store: StoreKind) => string | undefined;

const STORE_ORDER: readonly StoreKind[] = ['memory', 'sqlite', 'postgres', 'redis', 'redis-node'];
const IMPLS: readonly Impl[] = ['idemkit', 'node-idempotency', 'express-idempotency', 'powertools'];
const IMPL_TITLE: Record<Impl, string> = {
  bare: 'bare',
  idemkit: 'idemkit',
  'node-idempotency': '@node-idempotency/core',
  'express-idempotency': 'express-idempotency',
  powertools: 'Powertools idempotency',
};

interface TargetLine {
  readonly ok: boolean;
  readonly text: string;
}

function targets(results: BenchResults): TargetLine[] {
  const { configs, races, latencies } = results;
  const lines: TargetLine[] = [];
  // 1. Time added per request ≤ half the best race-correct peer's, same framework and store.
  for (const c of configs) {
    // New keys and replays: under contention most answers are cheap 409s, and without a key nothing is stored.
    if (c.impl !== 'idemkit' || c.delayMs !== 0 || (c.workload !== 'new-key' && c.workload !== 'replay')) continue;
    const ours = addedOver(configs, c);
    if (ours === undefined) continue;
    const peers = configs.filter(
      (p) =>
        p.impl !== 'bare' &&
        p.impl !== 'idemkit' &&
        p.framework === c.framework &&
        p.store === c.store &&
        p.workload === c.workload &&
        p.delayMs === 0 &&
        raceCorrect(races, p.framework, p.impl, p.store) !== false,
    );
    if (peers.length === 0) continue;
    const added = (p: ConfigResult) => addedOver(configs, p) ?? Infinity;
    const best = peers.reduce((a, b) => (added(b) < added(a) ? b : a));
    const theirs = added(best);
    const checked = raceCorrect(races, best.framework, best.impl, best.store) === undefined ? ' (race check not run)' : '';
    lines.push({
      ok: ours <= theirs / 2,
      text:
        `${c.framework}/${c.store}/${c.workload}: idemkit adds ${fixed(ours)} µs per request; the best race-correct peer, ` +
        `${best.impl}${checked}, adds ${fixed(theirs)} µs (target ≤ ${fixed(theirs / 2)} µs)`,
    });
  }
  // 2. Redis on Express: ≥ 80 % of bare for new keys, ≥ 88 % for replays.
  for (const [workload, min] of [
    ['new-key', 80],
    ['replay', 88],
  ] as const) {
    const c = configs.find((x) => x.impl === 'idemkit' && x.framework === 'express' && x.store === 'redis' && x.workload === workload && x.delayMs === 0);
    const over = c && ratioOver(configs, c);
    if (!c || over === undefined) continue;
    const ratio = 100 * over;
    lines.push({ ok: ratio >= min, text: `express/redis/${workload}: ${fixed(ratio)} % of bare throughput (target ≥ ${min} %)` });
  }
  // 3. Latency at half the bare maximum, loopback Redis: added p50 ≤ 0.3 ms, added p99 ≤ 1 ms.
  for (const l of latencies) {
    if (l.impl !== 'idemkit') continue;
    const bare = latencies.find((b) => b.impl === 'bare' && b.framework === l.framework && b.workload === l.workload);
    if (!bare) continue;
    const p50 = l.p50Micros - bare.p50Micros;
    const p99 = l.p99Micros - bare.p99Micros;
    const saturated = isSaturated(l) ? ` (saturated: ${int(l.achievedRate)} req/s achieved)` : '';
    lines.push({
      ok: p50 <= 300 && p99 <= 1000,
      text:
        `${l.framework}/redis/${l.workload} at ${int(l.rate)} req/s: added p50 ${fixed(p50 / 1e3, 3)} ms (≤ 0.3), ` +
        `added p99 ${fixed(p99 / 1e3, 3)} ms (≤ 1)${saturated}`,
    });
  }
  // 4. Zero double executions: the race check, and the contention workload.
  const ourRaces = races.filter((r) => r.impl === 'idemkit' && r.notApplicable === undefined);
  if (ourRaces.length > 0) {
    const doubles = ourRaces.reduce((n, r) => n + (r.doubleExecutions ?? 0) + (r.serverDoubleExecutions ?? 0), 0);
    const hangs = ourRaces.reduce((n, r) => n + (r.hangs ?? 0), 0);
    lines.push({
      ok: doubles === 0 && hangs === 0,
      text: `race check, idemkit on ${ourRaces.length} framework × store configurations: ${doubles} double executions, ${hangs} hangs (target 0)`,
    });
  }
  const contention = configs.filter((c) => c.impl === 'idemkit' && c.workload === 'contention');
  if (contention.length > 0) {
    const doubles = contention.reduce((n, c) => n + c.duplicates, 0);
    lines.push({ ok: doubles === 0, text: `contention workload, idemkit on ${contention.length} configurations: ${doubles} double executions (target 0)` });
  }
  return lines;
}

/** One line per implementation and store: speed next to the race check's and contention's findings. */
function glance(results: BenchResults): string[] {
  const { configs, races, meta } = results;
  const out: string[] = ['## At a glance', ''];
  out.push(
    'Throughput ratio against bare (0 ms handler), the race check (double executions / hangs over ' +
      `${meta.raceRounds} rounds of ${meta.raceConcurrency}), and double executions under contention.`,
    '',
    '| framework | implementation | store | new keys | replays | race: doubles / hangs | contention doubles |',
    '|---|---|---|---:|---:|---:|---:|',
  );
  let any = false;
  for (const framework of meta.frameworks) {
    const subjects = new Map<string, Subject>();
    for (const c of configs) if (c.framework === framework && c.impl !== 'bare' && c.delayMs === 0) subjects.set(`${c.impl}/${c.store}`, c);
    for (const r of races) if (r.framework === framework && r.name === r.impl && r.notApplicable === undefined) subjects.set(`${r.impl}/${r.store}`, r);
    const ordered = [...subjects.values()].sort((a, b) => IMPLS.indexOf(a.impl) - IMPLS.indexOf(b.impl) || STORE_ORDER.indexOf(a.store) - STORE_ORDER.indexOf(b.store));
    for (const { impl, store } of ordered) {
      const ratio = (workload: Workload) => {
        const c = configs.find((x) => x.impl === impl && x.framework === framework && x.store === store && x.workload === workload && x.delayMs === 0);
        const over = c && ratioOver(configs, c);
        return over === undefined ? '—' : `${fixed(over, 2)}×`;
      };
      const race = races.find((r) => r.framework === framework && r.impl === impl && r.store === store && r.name === impl);
      const raceText =
        race && race.notApplicable === undefined
          ? `${race.serverDoubleExecutions ? `**${race.serverDoubleExecutions}**` : '0'} / ${race.hangs ? `**${race.hangs}**` : '0'}`
          : '—';
      const contention = configs.find((x) => x.impl === impl && x.framework === framework && x.store === store && x.workload === 'contention');
      const contentionText = contention ? (contention.duplicates ? `**${contention.duplicates}**` : '0') : '—';
      out.push(`| ${framework} | ${IMPL_TITLE[impl]} | ${store} | ${ratio('new-key')} | ${ratio('replay')} | ${raceText} | ${contentionText} |`);
      any = true;
    }
  }
  out.push('');
  return any ? out : [];
}

/** The frameworks timed on fewer workloads or stores than the run's (REDUCED_MATRIX in options.ts), as the Plan line says it. */
function reducedText(meta: BenchResults['meta']): string {
  const same = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x) => b.includes(x));
  const reduced = (meta.matrix ?? []).filter((m) => !same(m.plans, meta.plans) || !same(m.stores, meta.stores));
  const groups = new Map<string, string[]>();
  for (const m of reduced) {
    const text = `workloads ${m.plans.join(', ') || 'none'} on stores ${m.stores.join(', ') || 'none'}`;
    groups.set(text, [...(groups.get(text) ?? []), m.framework]);
  }
  return [...groups].map(([text, frameworks]) => ` (${frameworks.join(' and ')} timed on ${text} only; the race check covers every store)`).join('');
}

function raceCell(races: readonly RaceEntry[], framework: Framework, impl: Impl, store: StoreKind): string {
  const ok = raceCorrect(races, framework, impl, store);
  return ok === undefined ? '' : ok ? '' : ' ⚠';
}

export function writeResultsMarkdown(results: BenchResults, rows: readonly Row[], notApplicable: NotApplicableFn): string {
  const { meta, configs, races, latencies } = results;
  const out: string[] = [];
  out.push('# idemkit against its npm peers', '');
  out.push(
    'Written by `npm run bench` (bench/run.ts); do not edit by hand. Every figure is measured against the bare framework ' +
      'in the same run: the ratio is with ÷ bare throughput, and *added µs* is `(1/with − 1/bare) × 1e6`, the time the ' +
      'implementation adds to each request on the saturated single-threaded server.',
    '',
  );
  // A busy machine makes every ratio noise: say so at the top rather than in a caveat at the end.
  const otherMedian = busyPercent(configs);
  if (otherMedian > BUSY_PERCENT) {
    out.push(
      `> **Preliminary: measured on a busy machine.** Other processes used a median ${fixed(otherMedian, 0)} % of a core during the ` +
        `measured runs (load average ${meta.loadAverage}). Ratios, added µs and latencies below are dominated by that noise; ` +
        'the race check and double-execution counts are not. Rerun `npm run bench` on a quiet machine for the figures.',
      '',
    );
  }
  out.push('## Run', '');
  out.push(
    `- Date: ${meta.date}`,
    `- Machine: ${meta.cpus}, ${meta.memory} RAM; Node ${meta.node}; load average ${meta.loadAverage}`,
    `- Code: ${meta.commit}`,
    `- Command: \`${meta.command}\``,
    `- Plan: frameworks ${meta.frameworks.join(', ')}; workloads ${meta.plans.join(', ')}; stores ${meta.stores.join(', ')}${reducedText(meta)}; peers ${meta.peers.join(', ') || 'none'}`,
    `- Throughput: autocannon, ${meta.connections} connections (64 for contention), pipelining 1; per configuration a fresh server process, a sanity check, a ${meta.warmupSec} s warm-up, then ${meta.runs} runs × ${meta.durationSec} s; medians (req/s and p99).`,
    `- Race check: \`idemkit check\`'s race case, ${meta.raceConcurrency} concurrent same-key requests released together × ${meta.raceRounds} rounds, ${meta.raceDelayMs} ms handler.`,
    `- Latency: a paced open-loop sender at half the bare framework's maximum, ${meta.latencyRuns} runs × ${meta.durationSec} s, medians.`,
    `- Took ${Math.round(meta.elapsedSec / 60)} min (estimated ${Math.ceil(meta.estimatedSec / 60)}).`,
    '',
  );
  out.push('| package | version |', '|---|---|');
  for (const [name, version] of Object.entries(meta.versions)) out.push(`| ${name} | ${version} |`);
  out.push('');

  out.push('## Targets', '');
  const lines = targets(results);
  if (lines.length === 0) out.push('No target applies to this subset.');
  for (const line of lines) out.push(`- **${line.ok ? 'PASS' : 'FAIL'}** ${line.text}`);
  out.push('', '![ratios against the bare framework](results-chart.svg)', '');

  out.push(...glance(results));

  if (races.length > 0) {
    out.push('## Race check (before timing)', '');
    out.push(
      `${meta.raceConcurrency} requests with one key, held one byte short and released together, × ${meta.raceRounds} rounds (a new key each). ` +
        '*Double executions*: handler runs beyond one per round, counted by the server; *seen by clients*: distinct ' +
        'original answers beyond one per round. A hang is a request with no answer within 10 s.',
      '',
    );
    out.push('| framework | implementation | store | double executions | seen by clients | hangs | errors | statuses | later request did not replay |', '|---|---|---|---:|---:|---:|---:|---|---:|');
    for (const r of races) {
      if (r.notApplicable !== undefined) {
        out.push(`| ${r.framework} | ${r.name} | ${r.store} | n/a: ${r.notApplicable} | | | | | |`);
        continue;
      }
      const statuses = Object.entries(r.statuses ?? {})
        .map(([code, n]) => `${code}: ${n}`)
        .join(', ');
      const flag = (n: number | undefined) => (n ? `**${n}**` : '0');
      out.push(
        `| ${r.framework} | ${r.name} | ${r.store} | ${flag(r.serverDoubleExecutions)} | ${flag(r.doubleExecutions)} | ${flag(r.hangs)} | ${flag(r.errors)} | ${statuses} | ${r.laterReplayMismatches ?? ''} |`,
      );
    }
    out.push('');
  }

  for (const delayMs of [0, 5]) {
    const workloads: Workload[] = ['new-key', 'replay', 'contention', 'no-key'];
    for (const workload of workloads) {
      const group = configs.filter((c) => c.workload === workload && c.delayMs === delayMs);
      if (group.length === 0) continue;
      out.push(`## ${delayMs > 0 ? `${delayMs} ms handler, ` : ''}${WORKLOAD_TITLE[workload]}`, '');
      out.push(
        `Each cell: throughput ratio against bare · ${
          delayMs > 0
            ? 'median p99 latency'
            : 'µs added per request, from throughput (and, in parentheses, measured directly: server CPU µs per request minus bare, less sensitive to other load on the machine)'
        }` +
          (workload === 'contention' ? ' · share of 409 (in flight) answers · double executions during the runs' : '') +
          '. ⚠ marks an implementation that failed the race check.',
        '',
      );
      out.push(`| framework | store | bare req/s${delayMs > 0 ? ' (p99)' : ''} | ${IMPLS.map((i) => IMPL_TITLE[i]).join(' | ')} |`, `|---|---|---:|${IMPLS.map(() => '---:').join('|')}|`);
      for (const framework of meta.frameworks) {
        const bare = group.find((c) => c.impl === 'bare' && c.framework === framework);
        if (!bare) continue;
        const stores = [...new Set(group.filter((c) => c.framework === framework && c.impl !== 'bare').map((c) => c.store))];
        for (const store of stores) {
          const cells = IMPLS.map((impl) => {
            const c = group.find((x) => x.impl === impl && x.framework === framework && x.store === store);
            if (!c) {
              const reason = notApplicable(impl, framework, store);
              return reason ? `n/a (${reason})` : '—';
            }
            const baseline = baselineOf(configs, c) ?? bare;
            const ratio = c.reqPerSec / baseline.reqPerSec;
            // With a slow handler the server is not saturated: throughput does not give time per request, p99 does.
            let cell =
              delayMs > 0
                ? `${fixed(ratio, 2)}× · p99 ${c.p99Ms} ms`
                : `${fixed(ratio, 2)}× · ${signed(addedMicros(c.reqPerSec, baseline.reqPerSec))} µs (CPU ${signed(c.serverCpuMicrosPerReq - baseline.serverCpuMicrosPerReq)})`;
            if (workload === 'contention') {
              const total = Object.values(c.statuses).reduce((a, b) => a + b, 0);
              cell += ` · 409: ${fixed((100 * (c.statuses['409'] ?? 0)) / total, 0)} % · ${c.duplicates ? `**${c.duplicates} doubles**` : '0 doubles'}`;
            }
            if (c.problems.length > 0) cell += ` (${c.problems.join('; ')})`;
            return cell + raceCell(races, framework, impl, store);
          });
          out.push(`| ${framework} | ${store} | ${int(bare.reqPerSec)}${delayMs > 0 ? ` (${bare.p99Ms} ms)` : ''} | ${cells.join(' | ')} |`);
        }
      }
      if (delayMs > 0) {
        out.push(
          '',
          `With a ${delayMs} ms handler, 50 connections cap throughput at 10 000 req/s; where the server has CPU to spare the cost shows as latency, not lost throughput.`,
        );
      }
      out.push('');
    }
  }

  if (latencies.length > 0) {
    out.push('## Latency at half the bare maximum (Redis)', '');
    out.push(
      'Requests sent on a fixed schedule (open loop) at half the bare framework\'s measured maximum for the workload, latency from each ' +
        'request\'s pick-up by the sender (within a 1 ms tick of its scheduled time) to the end of its response, microsecond resolution. ' +
        'Added = implementation − bare. *Saturated*: the configuration could not serve the rate, so its latency is queueing.',
      '',
    );
    out.push('| framework | workload | rate (req/s) | bare p50 / p99 (ms) | ' + IMPLS.map((i) => `${IMPL_TITLE[i]} added p50 / p99 (ms)`).join(' | ') + ' |');
    out.push(`|---|---|---:|---:|${IMPLS.map(() => '---:').join('|')}|`);
    for (const framework of meta.frameworks) {
      for (const workload of ['new-key', 'replay'] as const) {
        const bare = latencies.find((l) => l.impl === 'bare' && l.framework === framework && l.workload === workload);
        if (!bare) continue;
        const cells = IMPLS.map((impl) => {
          const l = latencies.find((x) => x.impl === impl && x.framework === framework && x.workload === workload);
          if (!l) return notApplicable(impl, framework, 'redis') ? 'n/a' : '—';
          const warn =
            (l.errors > 0 ? ` (${l.errors} errors)` : '') +
            (isSaturated(l) ? ` (only ${int(l.achievedRate)} req/s achieved: saturated)` : '');
          return `${signed((l.p50Micros - bare.p50Micros) / 1e3, 3)} / ${signed((l.p99Micros - bare.p99Micros) / 1e3, 3)}${warn}`;
        });
        out.push(
          `| ${framework} | ${workload} | ${int(bare.rate)} | ${fixed(bare.p50Micros / 1e3, 3)} / ${fixed(bare.p99Micros / 1e3, 3)} | ${cells.join(' | ')} |`,
        );
      }
    }
    out.push('');
  }

  out.push(...idemkitAlone(results, rows));

  out.push(...everyConfiguration(configs));

  const problems = configs.filter((c) => c.problems.length > 0);
  const noisy = configs.filter((c) => c.spreadPercent > 10 || (c.otherCpuPercent ?? 0) > 15);
  if (problems.length > 0 || noisy.length > 0) {
    out.push('## Caveats in this run', '');
    for (const c of problems) out.push(`- ${c.framework} ${c.workload} ${c.impl}/${c.store}${c.delayMs ? ` (${c.delayMs} ms)` : ''}: ${c.problems.join('; ')}`);
    if (noisy.length > 0) {
      out.push(
        `- ${noisy.length} configuration(s) had a run-to-run spread over 10 % or other processes using over 15 % of a core ` +
          `(${noisy.map((c) => `${c.framework} ${c.workload} ${c.impl}/${c.store}`).slice(0, 8).join('; ')}${noisy.length > 8 ? '; …' : ''}): rerun on a quiet machine before trusting small differences.`,
      );
    }
    out.push('');
  }

  out.push(...HOW_SECTION);
  return `${out.join('\n')}\n`;
}

/**
 * idemkit against the bare framework in detail: its raw store time, what it adds per request next
 * to that (the budget), and with a slow handler, where the cost moves from throughput to CPU.
 */
function idemkitAlone(results: BenchResults, rows: readonly Row[]): string[] {
  const { raw, configs } = results;
  if (raw.stores.length === 0 && rows.length === 0) return [];
  const out: string[] = ['## idemkit alone', ''];
  if (raw.stores.length > 0) {
    out.push(
      `Raw store time, in-process and without HTTP: mean per operation over ${int(raw.iterations)} iterations, median of ${raw.repetitions} repetitions.`,
      '',
      '| store | new key: claim + complete (µs) | replay: claim on a completed key (µs) | round trips: new key / replay |',
      '|---|---:|---:|---:|',
    );
    for (const s of raw.stores) {
      const trips = s.newKeyRoundTrips === 0 && s.replayRoundTrips === 0 ? 'in process' : `${s.newKeyRoundTrips} / ${s.replayRoundTrips}`;
      out.push(`| ${s.store} | ${fixed(s.newKeyMicros, 2)} | ${fixed(s.replayMicros, 2)} | ${trips} |`);
    }
    out.push('', `Fingerprint of the bench request (canonical JSON + SHA-256), for reference: ${fixed(raw.fingerprintMicros, 2)} µs.`, '');
  }
  const direct = rows.filter((r) => r.delayMs === 0);
  if (direct.length > 0) {
    out.push(
      'Against the bare framework, trivial handler. *CPU Δ*: server CPU µs per request with minus bare (its kernel part in brackets), ' +
        'the added time measured directly. *Store in the server*: the same store calls timed inside the server, in one more run after ' +
        'the timed ones (in-process stores only); *the rest* is the added time minus that: what the middleware and the slower server ' +
        'cost besides the store.',
      '',
      '| framework | store | workload | bare → with req/s | ratio | p99 bare → with (ms) | added µs | CPU Δ µs (kernel) | raw store µs | added ≤ 1.3×raw+15 | store in the server µs | the rest µs | ratio target |',
      '|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|',
    );
    for (const r of direct) {
      const added = r.addedCheck === undefined ? '—' : `${r.addedCheck} (${r.addedCheck === 'PASS' ? '≤' : '>'} ${fixed(r.budgetMicros)})`;
      const ratio = r.ratioCheck === undefined ? '—' : `${r.ratioCheck} (≥ ${r.ratioTargetPercent} %)`;
      const inServer = r.storeMicrosInServer === undefined ? '—' : fixed(r.storeMicrosInServer);
      const rest = r.storeMicrosInServer === undefined ? '—' : fixed(r.addedMicros - r.storeMicrosInServer);
      out.push(
        `| ${r.framework} | ${r.store} | ${r.workload} | ${int(r.bareReqPerSec)} → ${int(r.withReqPerSec)} | ${fixed(r.ratioPercent)} % | ` +
          `${ms(r.bareP99Ms)} → ${ms(r.withP99Ms)} | ${fixed(r.addedMicros)} | ${fixed(r.addedCpuMicros)} (${fixed(r.addedSysMicros)}) | ` +
          `${fixed(r.rawStoreMicros, 2)} | ${added} | ${inServer} | ${rest} | ${ratio} |`,
      );
    }
    out.push('');
  }
  const delayed = rows.filter((r) => r.delayMs > 0);
  if (delayed.length > 0) {
    out.push(
      `With a ${delayed[0]!.delayMs} ms handler (new key per request): where the bare server stays under ~100 % CPU, the added CPU time ` +
        'is absorbed and the difference shows in latency; where it is at ~100 %, the server is still the bottleneck.',
      '',
      '| framework | store | bare → with req/s | ratio | p99 bare → with (ms) | server CPU bare → with | CPU Δ µs |',
      '|---|---|---:|---:|---:|---:|---:|',
    );
    for (const r of delayed) {
      const cpu = (impl: Impl, store: StoreKind) =>
        configs.find((c) => c.impl === impl && c.framework === r.framework && c.store === store && c.workload === r.workload && c.delayMs === r.delayMs)
          ?.serverCpuPercent ?? NaN;
      out.push(
        `| ${r.framework} | ${r.store} | ${int(r.bareReqPerSec)} → ${int(r.withReqPerSec)} | ${fixed(r.ratioPercent)} % | ${ms(r.bareP99Ms)} → ${ms(r.withP99Ms)} | ` +
          `${fixed(cpu('bare', 'none'), 0)} % → ${fixed(cpu('idemkit', r.store), 0)} % | ${fixed(r.addedCpuMicros)} |`,
      );
    }
    out.push('');
  }
  return out;
}

/** Every configuration measured, with its spread and the noise around it: what to check before trusting a figure. */
function everyConfiguration(configs: readonly ConfigResult[]): string[] {
  if (configs.length === 0) return [];
  const out = [
    '## Every configuration',
    '',
    '| framework | implementation | store | workload | handler | req/s (median) | spread | p50 / p99 (ms) | server CPU µs/req (kernel) | server CPU | other CPU | problems |',
    '|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---|',
  ];
  for (const c of configs) {
    out.push(
      `| ${c.framework} | ${c.impl} | ${c.store} | ${c.workload} | ${c.delayMs} ms | ${int(c.reqPerSec)} | ${fixed(c.spreadPercent)} % | ` +
        `${ms(c.p50Ms)} / ${ms(c.p99Ms)} | ${fixed(c.serverCpuMicrosPerReq)} (${fixed(c.serverSysMicrosPerReq)}) | ${fixed(c.serverCpuPercent, 0)} % | ` +
        `${c.otherCpuPercent === undefined ? 'n/a' : `${fixed(c.otherCpuPercent, 0)} %`}` +
        `${c.discardedRuns > 0 ? ` (${c.discardedRuns} noisy run(s) redone)` : ''} | ${c.problems.join('; ') || '—'} |`,
    );
  }
  out.push('');
  return out;
}

const HOW_SECTION = [
  '## How the peers are wired',
  '',
  'One handler everywhere: `POST /charges` → `201 {"id": "<uuid>", "ok": true}` with the same JSON body parsing; the peers wrap that same function (bench/peers/*.ts). ' +
    'Koa 3 with @koa/router: idemkit/koa\'s middleware on the route, and a small JSON body reader in place of @koa/bodyparser (not installed) on both sides (bench/server-koa.ts). ' +
    'Nest 11 on its Express platform (`rawBody: true`): `IdempotencyModule.forRoot` and `@Idempotent()` on the controller (bench/server-nest.ts).',
  '',
  '- **@node-idempotency/core** with `@node-idempotency/storage-adapter-memory` / `-redis`: `onRequest` before the handler (a cached answer is sent as is; `REQUEST_IN_PROGRESS` → 409, fingerprint mismatch → 422), `onResponse` with the handler\'s answer, awaited before the answer is sent. Express: a middleware after `express.json()` that wraps `res.json`; Fastify: `preHandler` + `onSend` hooks. Its claim is `SET NX PX` (one round trip), completion a `SET` (one more); a replay costs `SET NX` + `GET`.',
  '- **express-idempotency** with `express-idempotency-redis-adapter`: the middleware before the handler, `getSharedIdempotencyService().isHit(req)` at the top of the handler, as its README shows. Express only. It reads (`GET`) then writes (`SET`, no `NX`): two concurrent requests with one key can both miss and both run the handler. Replays compare the stored body with `deep-equal`.',
  '- **@aws-lambda-powertools/idempotency** with `CachePersistenceLayer` over `@redis/client`: `makeIdempotent` around the handler function, event `{ headers, body }`, `eventKeyJmesPath: \'headers."idempotency-key"\'`; in-progress → 409. Each call passes a Lambda-like context (`getRemainingTimeInMillis`: 30 s), which gives the in-progress record its expiry. Without it (the race table\'s *no-context* row), a concurrent duplicate finds an in-progress record with no expiry, treats it as an orphan, takes the orphan lock and runs the handler again (reported for the Python library as aws-powertools/powertools-lambda-python#8386; the TypeScript cache layer has the same code path).',
  '  Payload validation (`payloadValidationJmesPath: \'body\'`, its fingerprint) is **off** in the timed runs, so Powertools does less work per request than the others: in this version the cache layer drops the payload hash when it marks a record completed (`_updateRecord` writes status, expiry and data only), so every replay of a completed key fails validation with `IdempotencyValidationError` (the race table\'s *validation* row: 422s where replays belong). Upstream: aws-powertools/powertools-lambda-typescript#5705, fixed by #5706 after this version.',
  '- Where a peer cannot serve a configuration the tables say n/a with the reason. No peer runs on Koa or Nest: none has an adapter for them installed here (`@node-idempotency/nestjs` exists but is not installed), and the glue above is written for Express and Fastify.',
  '',
  '## Reproduce',
  '',
  '```sh',
  'npm ci',
  '# PostgreSQL on 127.0.0.1:5432 (db test, user postgres, trust) and Redis on 127.0.0.1:6379, or BENCH_POSTGRES_URL / BENCH_REDIS_URL',
  'npm run bench                                   # everything (Koa and Nest on a reduced matrix): ~31 min on 2 cores',
  'npm run bench -- --quick                        # 1 s × 2 runs, a smoke test',
  'BENCH_FRAMEWORKS=express BENCH_STORES=redis BENCH_WORKLOADS=new-key,replay npm run bench   # a subset',
  'BENCH_PEERS=none npm run bench                  # idemkit only',
  'BENCH_FRAMEWORKS=koa,nest BENCH_WORKLOADS=all BENCH_STORES=all npm run bench   # Koa and Nest on every workload and store',
  '```',
  '',
  'Knobs: `BENCH_DURATION` (s per run, default 2), `BENCH_RUNS` (5), `BENCH_WARMUP` (1), `BENCH_LATENCY_RUNS` (3), `BENCH_RACE_CONCURRENCY` (20), ' +
    '`BENCH_RACE_ROUNDS` (10), `BENCH_RACE_DELAY` (ms, 5), `BENCH_NOISE_LIMIT`, `BENCH_QUIET_WAIT`; flags `--quick`, `--no-delay`, `--no-race`, `--no-latency`. ' +
    'Subsets: `BENCH_FRAMEWORKS` (fastify, express, koa, nest), `BENCH_WORKLOADS` (new-key, replay, contention, no-key, new-key-5ms), `BENCH_STORES` (memory, sqlite, postgres, redis, redis-node: the Redis store on node-redis), `BENCH_PEERS` (node-idempotency, express-idempotency, powertools, or none); `all` or `none` for any of them. ' +
    'Without `BENCH_WORKLOADS` and `BENCH_STORES`, Koa and Nest are timed on new-key, replay, contention and no-key, on memory and Redis; either variable, given, applies to every framework.',
  '',
];

