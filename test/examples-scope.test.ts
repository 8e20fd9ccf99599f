/**
 * Issue 26 item 1: no example stores a credential as the scope. Every README example set the
 * scope to the raw `Authorization` header, so the bearer token was stored in clear text and
 * printed by `idemkit list`/`inspect`/`ui`. Now each quickstart derives a tenant id (demo auth),
 * and every README block that reads the header passes it through `tenantOf`, never into a scope.
 */
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startExample } from './support/examples.js';

const root = join(import.meta.dirname, '..');
const dir = mkdtempSync(join(tmpdir(), 'idemkit-examples-scope-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const TOKEN = 'sk_live_7f3a9c1e5b2d4f6a8c0eScopeTest';

/** Every text value of every row of every table in a SQLite file, with the rows' scopes. */
function storedRows(file: string): Array<Record<string, unknown>> {
  const db = new Database(file, { readonly: true });
  try {
    const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((t) => t.name);
    return tables.flatMap((table) => db.prepare(`SELECT * FROM "${table}"`).all() as Array<Record<string, unknown>>);
  } finally {
    db.close();
  }
}

describe.each(['web', 'hono', 'express', 'fastify', 'koa', 'nest'])('example %s', (name) => {
  let url: string;
  let child: ChildProcess;
  const file = join(dir, `${name}.db`);
  beforeAll(async () => {
    ({ url, child } = await startExample(name, { STORE_URL: `sqlite:${file}` }));
  }, 30_000);
  afterAll(() => {
    if (child.exitCode === null) process.kill(child.pid!, 'SIGKILL');
  });

  it('stores a tenant id as the scope, never the bearer token', async () => {
    const key = randomUUID();
    const response = await fetch(`${url}/charges`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', 'idempotency-key': key },
      body: '{"amount":1}',
    });
    expect(response.status).toBe(201);
    const rows = storedRows(file);
    const record = rows.find((row) => row.key === key);
    expect(record).toBeDefined();
    expect(record!.scope).toMatch(/^tenant-[0-9a-f]{16}$/);
    for (const row of rows) {
      for (const value of Object.values(row)) {
        const text = Buffer.isBuffer(value) ? value.toString('latin1') : String(value);
        expect(text).not.toContain(TOKEN);
      }
    }
  });
});

/** The ```ts blocks of a Markdown file, each as its lines. */
function tsBlocks(markdown: string): string[][] {
  return [...markdown.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1]!.split('\n'));
}

describe.each(['README.md', 'README.zh-CN.md'])('%s', (name) => {
  const markdown = readFileSync(join(root, name), 'utf8');

  it('no block sets a scope or a tenant from the raw Authorization header', () => {
    const lines = tsBlocks(markdown).flat();
    // The lines that read the header (not those naming a parameter after it).
    const reading = lines.filter((line) => /'authorization'|headers\.authorization/i.test(line) && !/^\s*\/\//.test(line));
    expect(reading.length).toBe(name === 'README.md' ? 5 : 0); // 20 lines, Web, Express, Fastify, Koa (README.zh-CN shows no code)
    for (const line of reading) expect(line).toMatch(/tenantOf\((?:[a-z.]+\('authorization'\)|request\.headers\.authorization)\)/);
    // Inline code too (the Hono one-liner): a scope hook never returns the header itself.
    expect(markdown).not.toMatch(/scope: \([a-z]+\) => [a-z.]*(header|get)\('authorization'\)/i);
    expect(markdown).not.toMatch(/tenant = [a-z.]*(get\('authorization'\)|headers\.authorization)/i);
  });

  it.runIf(name === 'README.md')('the 20-line example derives its scope with tenantOf, which is not the header', () => {
    const block = /## 20 lines\s+```ts\n([\s\S]*?)```/.exec(markdown)?.[1] ?? '';
    expect(block).toMatch(/scope: \(c\) => tenantOf\(c\.req\.header\('authorization'\)\)/);
    expect(block).toMatch(/const tenantOf = /);
    // Every other block that uses tenantOf gets it from there.
    expect(tsBlocks(markdown).filter((lines) => lines.some((line) => line.includes('tenantOf('))).length).toBeGreaterThanOrEqual(5);
  });
});
