/**
 * The store contract: the cases every `IdempotencyStore` must pass, run unchanged against each
 * store idemkit ships, and offered to third-party stores through `idemkit/kit`.
 *
 * It registers its cases with the test framework the caller passes in (vitest, Jest, or anything
 * with the same shape), so idemkit has no runtime dependency on a test runner:
 *
 *   import { afterAll, beforeAll, describe, expect, it } from 'vitest';
 *   describeStoreContract('my store', () => ({ store, advance }), { describe, it, expect, beforeAll, afterAll });
 *
 * The cases come in sections, each in its own file of this folder and its own `describe` block of
 * the same name, so a failing case names the file it is in, and a store can run only the sections
 * that apply to it (`{ sections: ['claim', 'fencing'] }`).
 */
import { closestName, optionReader } from '../../core/option-reader.js';
import { adminSection } from './admin.js';
import { claimSection } from './claim.js';
import type { ContractContext, ContractSuite, ContractTestApi } from './context.js';
import { contractSuite } from './context.js';
import { fencingSection } from './fencing.js';
import { instancesSection } from './instances.js';
import { recoverySection } from './recovery.js';
import { windowSection } from './window.js';

export type { ContractAssertion, ContractContext, ContractMatchers, ContractTestApi, ContractTestContext } from './context.js';

/**
 * The sections, in the order they run. Admin runs first: its first case counts the records of a
 * store no other case has written to yet, so that its counts are exact on every clock.
 */
const SECTIONS = {
  admin: adminSection,
  claim: claimSection,
  fencing: fencingSection,
  recovery: recoverySection,
  instances: instancesSection,
  window: windowSection,
} satisfies Record<string, (suite: ContractSuite) => void>;

/** A section of the store contract, as `describeStoreContract`'s `sections` option names it. */
export type ContractSection = keyof typeof SECTIONS;

const SECTION_NAMES = Object.keys(SECTIONS) as ContractSection[];

export function describeStoreContract(
  name: string,
  setup: () => Promise<ContractContext> | ContractContext,
  test: ContractTestApi,
  options: { readonly sections?: readonly ContractSection[] } = {},
): void {
  // Read before anything is registered, so a wrong name fails where the suite is declared.
  const sections = readSections(options);
  test.describe(`store contract: ${name}`, () => {
    let ctx: ContractContext | undefined;
    // Cases run after beforeAll: the context is there by then.
    const suite = contractSuite(test, () => ctx!);
    test.beforeAll(async () => {
      ctx = await setup();
    });
    test.afterAll(async () => {
      await ctx?.close?.();
    });
    for (const section of sections) test.describe(section, () => SECTIONS[section](suite));
  });
}

/** The sections `options.sections` names, in running order; all of them when it is absent. */
function readSections(options: { readonly sections?: readonly ContractSection[] }): readonly ContractSection[] {
  const read = optionReader('describeStoreContract()', options);
  const given = read.value('sections') as unknown;
  read.done();
  if (given === undefined) return SECTION_NAMES;
  const names = SECTION_NAMES.map((section) => `'${section}'`);
  const valid = `the sections are ${names.slice(0, -1).join(', ')} and ${names.at(-1)}`;
  if (!Array.isArray(given) || given.length === 0) read.fail('sections', `expected a non-empty array of section names; ${valid}`);
  for (const section of given as unknown[]) {
    if (SECTION_NAMES.includes(section as ContractSection)) continue;
    const meant = typeof section === 'string' ? closestName(section, SECTION_NAMES) : undefined;
    const hint = meant === undefined ? '' : ` (did you mean '${meant}'?)`;
    read.fail('sections', `unknown section ${JSON.stringify(section) ?? String(section)}${hint}; ${valid}`);
  }
  return SECTION_NAMES.filter((section) => (given as unknown[]).includes(section));
}
