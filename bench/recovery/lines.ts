/**
 * Lines of user code: the lines of a TypeScript file that hold code, not counting blank lines and
 * lines that are only comments. A small scanner rather than a regex, so `//` inside a string or a
 * template literal (a URL) is not taken for a comment. (A regex literal holding `//` or a quote
 * would confuse it; the app files have none.)
 */
export function codeLines(source: string): number {
  let count = 0;
  let lineHasCode = false;
  /** What encloses the scanner now; a template's `${` pushes code, its `}` pops back to the template. */
  const stack: Array<'code' | 'block' | "'" | '"' | '`'> = ['code'];
  /** Open braces inside each `${ … }`, so its closing brace is told from an object's. */
  const braces: number[] = [];
  for (let i = 0; i < source.length; i++) {
    const c = source[i]!;
    const state = stack[stack.length - 1]!;
    if (c === '\n') {
      if (lineHasCode) count++;
      lineHasCode = false;
      continue;
    }
    if (state === 'block') {
      if (c === '*' && source[i + 1] === '/') {
        stack.pop();
        i++;
      }
      continue;
    }
    if (state === "'" || state === '"') {
      lineHasCode = true;
      if (c === '\\') i++;
      else if (c === state) stack.pop();
      continue;
    }
    if (state === '`') {
      lineHasCode = true;
      if (c === '\\') i++;
      else if (c === '`') stack.pop();
      else if (c === '$' && source[i + 1] === '{') {
        stack.push('code');
        braces.push(0);
        i++;
      }
      continue;
    }
    // code
    if (c === '/' && source[i + 1] === '/') {
      while (i + 1 < source.length && source[i + 1] !== '\n') i++;
      continue;
    }
    if (c === '/' && source[i + 1] === '*') {
      stack.push('block');
      i++;
      continue;
    }
    if (/\s/.test(c)) continue;
    lineHasCode = true;
    if (c === "'" || c === '"' || c === '`') stack.push(c);
    else if (braces.length > 0 && stack.length > 1 && c === '{') braces[braces.length - 1]!++;
    else if (braces.length > 0 && stack.length > 1 && c === '}') {
      if (braces[braces.length - 1] === 0) {
        braces.pop();
        stack.pop();
      } else braces[braces.length - 1]!--;
    }
  }
  if (lineHasCode) count++;
  return count;
}
