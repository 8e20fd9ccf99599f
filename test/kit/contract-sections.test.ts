// The store contract's sections: each registers only its own cases, under a describe block of its
// name, each runs alone against a store, and `sections` refuses a name it does not know.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeStoreContract } from 'idemkit/kit';
import type { ContractTestApi } from 'idemkit/kit';
import { memoryStore } from 'idemkit/stores/memory';
import { InvalidOptionError } from '../../src/core/errors.js';
import { manualClock } from '../stores/manual-clock.js';

const ALL = ['admin', 'claim', 'fencing', 'recovery', 'instances', 'window'] as const;
type Section = (typeof ALL)[number];

const memory = () => {
  const clock = manualClock();
  const store = memoryStore({ clock: clock.now, maxResponseBytes: 64 * 1024 });
  return { store, advance: clock.advance, close: () => store.close() };
};

/** A test framework that runs nothing: it records each case by its describe path, and the hooks. */
function recorder() {
  const cases: Array<{ path: string[]; name: string }> = [];
  const hooks: string[] = [];
  const path: string[] = [];
  const test: ContractTestApi = {
    describe(name, body) {
      path.push(name);
      try {
        body();
      } finally {
        path.pop();
      }
    },
    it: (name) => void cases.push({ path: [...path], name }),
    expect: () => {
      throw new Error('no case runs here');
    },
    beforeAll: () => void hooks.push(`beforeAll in ${path.join(' > ')}`),
    afterAll: () => void hooks.push(`afterAll in ${path.join(' > ')}`),
  };
  return { test, cases, hooks };
}

/** The names of the cases each section registers when the whole contract is declared. */
function wholeSuite(): Map<string, string[]> {
  const { test, cases } = recorder();
  describeStoreContract('memory', memory, test);
  const bySection = new Map<string, string[]>();
  for (const { path, name } of cases) {
    expect(path).toHaveLength(2);
    expect(path[0]).toBe('store contract: memory');
    bySection.set(path[1]!, [...(bySection.get(path[1]!) ?? []), name]);
  }
  return bySection;
}

describe('describeStoreContract sections', () => {
  it('puts every case in a describe block named after its section, the sections in running order, admin first', () => {
    const bySection = wholeSuite();
    expect([...bySection.keys()]).toEqual([...ALL]);
    for (const section of ALL) expect(bySection.get(section)!.length).toBeGreaterThan(0);
    const names = [...bySection.values()].flat();
    expect(new Set(names).size).toBe(names.length);
  });

  for (const section of ALL) {
    it(`sections: ['${section}'] registers that section's cases and no other's, with the suite's hooks`, () => {
      const whole = wholeSuite();
      const { test, cases, hooks } = recorder();
      describeStoreContract('memory', memory, test, { sections: [section] });
      expect(cases.map((c) => c.path)).toEqual(cases.map(() => ['store contract: memory', section]));
      expect(cases.map((c) => c.name)).toEqual(whole.get(section));
      expect(hooks).toEqual(['beforeAll in store contract: memory', 'afterAll in store contract: memory']);
    });
  }

  it('runs the sections named in running order, whatever order they are given in, each once', () => {
    const whole = wholeSuite();
    const { test, cases } = recorder();
    describeStoreContract('memory', memory, test, { sections: ['window', 'claim', 'window'] });
    expect([...new Set(cases.map((c) => c.path[1]))]).toEqual(['claim', 'window']);
    expect(cases.map((c) => c.name)).toEqual([...whole.get('claim')!, ...whole.get('window')!]);
  });

  it('refuses an unknown section eagerly, naming the option, the name given and the valid ones, and registers nothing', () => {
    const { test, cases, hooks } = recorder();
    const declare = (options: object) => () => describeStoreContract('memory', memory, test, options as { sections?: Section[] });
    expect(declare({ sections: ['claim', 'fencng'] })).toThrow(InvalidOptionError);
    expect(declare({ sections: ['claim', 'fencng'] })).toThrow(
      "Invalid option `sections`: unknown section \"fencng\" (did you mean 'fencing'?); the sections are 'admin', 'claim', 'fencing', 'recovery', 'instances' and 'window'",
    );
    expect(declare({ sections: ['transactions'] })).toThrow(/^Invalid option `sections`: unknown section "transactions"; the sections are 'admin', /);
    expect(declare({ sections: [42] })).toThrow(/`sections`: unknown section 42; the sections are/);
    expect(declare({ sections: [] })).toThrow(/`sections`: expected a non-empty array of section names; the sections are 'admin', /);
    expect(declare({ sections: 'claim' })).toThrow(/`sections`: expected a non-empty array of section names/);
    expect(declare({ section: ['claim'] })).toThrow(/`section`: unknown option; did you mean `sections`\?/);
    expect(cases).toEqual([]);
    expect(hooks).toEqual([]);
  });
});

// Each section alone against the memory store: it needs nothing another section leaves behind.
for (const section of ALL) {
  describeStoreContract(`memory, ${section} alone`, memory, { describe, it, expect, beforeAll, afterAll }, { sections: [section] });
}
