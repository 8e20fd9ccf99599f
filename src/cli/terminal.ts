// The terminal escaping lives in src/check/terminal.ts: `idemkit check` prints what a target
// answered and needs it too, and src/check may not import src/cli (src/cli imports src/check).
export { printable, quoted, terminalJson, terminalText } from '../check/terminal.js';
