/**
 * The store contract moved to ./contract/ (a file per section, index.ts declaring the suite); this
 * path stays while src/kit/index.ts re-exports from it.
 */
export { describeStoreContract } from './contract/index.js';
export type { ContractAssertion, ContractContext, ContractMatchers, ContractSection, ContractTestApi, ContractTestContext } from './contract/index.js';
