// docs/architecture.md against the code: every folder of src/ has its row, every import stays
// within what its row allows (no arrow up, no cycle), every path the page names exists, and the
// READMEs and CONTRIBUTING.md link to it.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const page = readFileSync(join(root, 'docs/architecture.md'), 'utf8');

/** The floors table: `| floor | \`src/x/\` | what | may import |`. */
const floors = new Map<string, { floor: number; allowed: Set<string> }>();
for (const [, floor, folder, allowed] of page.matchAll(/^\| (\d) \| `src\/([a-z]+)\/` \| [^|]+ \| ([^|]+) \|$/gm)) {
  const names = allowed!.trim() === 'nothing of idemkit' ? [] : allowed!.split(',').map((name) => name.trim());
  floors.set(folder!, { floor: Number(floor), allowed: new Set(names) });
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** The top-level src/ folders a file imports from, static or dynamic, other than its own. */
function importedFolders(file: string): Set<string> {
  const own = relative(join(root, 'src'), file).split(sep)[0]!;
  const text = readFileSync(file, 'utf8');
  const found = new Set<string>();
  for (const [, specifier] of text.matchAll(/(?:from|import\()\s*'(\.[^']+)'/g)) {
    const target = relative(join(root, 'src'), join(file, '..', specifier!)).split(sep);
    if (target[0] !== own && target[0] !== '..') found.add(target[0]!);
  }
  return found;
}

describe('docs/architecture.md', () => {
  it('has a row for every folder of src/, and no row for a folder that is gone', () => {
    const folders = readdirSync(join(root, 'src'), { withFileTypes: true }).filter((entry) => entry.isDirectory()).map((entry) => entry.name);
    expect([...floors.keys()].sort()).toEqual(folders.sort());
  });

  it('names every store folder', () => {
    for (const entry of readdirSync(join(root, 'src/stores'), { withFileTypes: true })) {
      if (entry.isDirectory()) expect(page, `src/stores/${entry.name}/`).toContain(`\`src/stores/${entry.name}/\``);
    }
  });

  it('every import stays within its row: only folders on floors below, as listed', () => {
    const breaches: string[] = [];
    for (const [folder, { floor, allowed }] of floors) {
      for (const file of sourceFiles(join(root, 'src', folder))) {
        for (const target of importedFolders(file)) {
          const below = (floors.get(target)?.floor ?? Infinity) < floor;
          if (!allowed.has(target) || !below) breaches.push(`${relative(root, file)} imports src/${target}/`);
        }
      }
    }
    expect(breaches).toEqual([]);
  });

  it('names only paths that exist', () => {
    const named = [...page.matchAll(/`((?:src|test|spec|sql|docs)\/[^`*…\s]+)`/g)].map((match) => match[1]!);
    expect(named.length).toBeGreaterThan(30);
    expect(named.filter((path) => !existsSync(join(root, path)))).toEqual([]);
  });

  it('is linked from both READMEs and CONTRIBUTING.md', () => {
    for (const file of ['README.md', 'README.zh-CN.md', 'CONTRIBUTING.md']) {
      expect(readFileSync(join(root, file), 'utf8'), file).toMatch(/\]\(docs\/architecture\.md\)/);
    }
  });
});
