/**
 * A key given twice keeps its last value in a fingerprint, on every runtime. Deno 2.9's JSON.parse
 * keeps the first of two equal keys where one is escaped (when a later key holds an escape too),
 * and not the same one on every parse (src/core/canonical-json.ts); this file runs in the Deno leg
 * of npm run test:runtimes, where it failed before canonicalJsonText read such texts itself.
 */
import { describe, expect, it } from 'vitest';
import { canonicalJsonText } from '../../src/core/canonical-json.js';
import { fingerprint } from '../../src/core/fingerprint.js';

const cases: ReadonlyArray<readonly [string, string]> = [
  ['{"\\u0061":"x","\\u0061":[1],"\\\\":{"a":"y"}}', '{"\\\\":{"a":"y"},"a":[1]}'],
  ['{"a":"x","\\u0061":[1],"\\n":0}', '{"\\n":0,"a":[1]}'],
  ['{"\\u0061":"x","a":[1],"b\\"":{"\\u0061":1,"a":2}}', '{"a":[1],"b\\"":{"a":2}}'],
  ['{"a":1,"a":2}', '{"a":2}'],
];

describe('a key given twice keeps its last value', () => {
  it.each(cases)('%s → %s, on every one of 50 reads', (text, canonical) => {
    const seen = new Set<string | undefined>();
    for (let i = 0; i < 50; i++) seen.add(canonicalJsonText(text));
    expect([...seen]).toEqual([canonical]);
  });

  it('so one body has one fingerprint, however often it is read', () => {
    const body = Buffer.from(cases[0]![0]);
    const facts = { method: 'POST', path: '/charges', contentType: 'application/json', body };
    const prints = new Set<string>();
    for (let i = 0; i < 50; i++) prints.add(fingerprint(facts));
    expect(prints.size).toBe(1);
    expect([...prints][0]).toBe(fingerprint({ ...facts, body: Buffer.from(cases[0]![1]) }));
  });
});
