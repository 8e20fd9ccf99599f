/**
 * Issue 26 item 1, the docs: a scope is stored in every record (and shown by `idemkit list`,
 * `inspect` and `ui`), so no code block in README*.md or docs/ may pass the Authorization header
 * into a scope. Every read of the header in a TypeScript block goes through `tenantOf(…)`, the
 * README's stand-in for the application's authentication (a tenant id, never the token).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');

function markdownFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return markdownFiles(path);
    return entry.name.endsWith('.md') ? [path] : [];
  });
}

const files = [join(root, 'README.md'), join(root, 'README.zh-CN.md'), ...markdownFiles(join(root, 'docs'))];

/** Each read of the Authorization header in a ts/js code block: where, the text around it, and whether tenantOf(…) takes it. */
function headerReads(file: string): Array<{ where: string; text: string; throughTenantOf: boolean }> {
  const found: Array<{ where: string; text: string; throughTenantOf: boolean }> = [];
  let inCode = false;
  readFileSync(file, 'utf8').split('\n').forEach((line, index) => {
    const fence = /^\s*```(\w*)/.exec(line);
    if (fence) {
      inCode = !inCode && /^(ts|tsx|typescript|js|javascript|mjs)$/.test(fence[1]!);
      return;
    }
    if (!inCode) return;
    const reads = /(?:headers\.get|\.header|\.get)\(\s*['"`]authorization['"`]\s*\)|headers\.authorization\b|headers\[\s*['"`]authorization['"`]\s*\]/gi;
    for (const match of line.matchAll(reads)) {
      found.push({
        where: `${relative(root, file)}:${index + 1}`,
        text: line.slice(Math.max(0, match.index - 40), match.index + match[0].length + 2).trim(),
        // The read is the whole argument: `tenantOf(request.headers.get('authorization'))`, `tenantOf(req.get('authorization'))`.
        throughTenantOf: /tenantOf\(\s*[\w.]*$/.test(line.slice(0, match.index)),
      });
    }
  });
  return found;
}

describe('docs never scope by the Authorization header', () => {
  it('finds the README blocks that read the header (the check reads what it should)', () => {
    expect(headerReads(join(root, 'README.md')).length).toBeGreaterThanOrEqual(5);
  });

  it.each(files.map((file) => [relative(root, file), file]))('%s: every read of the header is the argument of tenantOf(…)', (_name, file) => {
    const raw = headerReads(file).filter((read) => !read.throughTenantOf);
    expect(raw).toEqual([]);
  });
});
