/**
 * Rewrites bench/RESULTS.md and the chart from bench/results/latest.json, without measuring again
 * (after a change to the report's layout):
 *
 *   node --conditions=idemkit-source --import tsx bench/render.ts
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { notApplicable } from './peers/applicability.js';
import { writeChart } from './chart.js';
import type { FloorResults } from './floors-report.js';
import { floorsSection, keepSections, replaceSection } from './floors-report.js';
import { writeResultsMarkdown } from './markdown.js';
import type { BenchResults, Row } from './results.js';

const latest = JSON.parse(readFileSync(new URL('./results/latest.json', import.meta.url), 'utf8')) as BenchResults & { rows: Row[]; floors?: FloorResults };
const file = new URL('./RESULTS.md', import.meta.url);
let text = writeResultsMarkdown(latest, latest.rows, notApplicable);
if (latest.floors) text = replaceSection(text, 'floors', floorsSection(latest.floors));
// The sections other parts wrote (npm run bench:instructions, npm run bench:floors) stay.
writeFileSync(file, keepSections(readFileSync(file, 'utf8'), text));
writeChart(latest, new URL('./results-chart.svg', import.meta.url));
process.stderr.write('written: bench/RESULTS.md, bench/results-chart.svg\n');
