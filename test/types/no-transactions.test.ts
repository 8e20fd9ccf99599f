/**
 * Issue 26 item 18: `transactional: true` with a store that has no transactions is a compile error
 * (test/types/tx-types.test.ts holds the `@ts-expect-error` lines), and that error says what the
 * start-up error says (the store has no transactions; use a SQL store), not "Type 'true' is not
 * assignable to type 'undefined'". The program below is compiled with TypeScript's API, one file
 * held in memory, against idemkit's sources (the `idemkit-source` condition), as an app would.
 */
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { withIdempotency } from '../../src/http/web.js';
import { memoryStore } from '../../src/stores/memory/index.js';

const APP = join(import.meta.dirname, 'no-transactions-app.ts');
const SOURCE = `
import { withIdempotency } from 'idemkit/web';
import { idempotency as expressIdempotency } from 'idemkit/express';
import { memoryStore } from 'idemkit/stores/memory';
import { redisStore } from 'idemkit/stores/redis';
import { sqliteStore } from 'idemkit/stores/sqlite';
import type { Redis } from 'ioredis';
import Database from 'better-sqlite3';
declare const redis: Redis;
export const web = withIdempotency(async () => new Response(), { store: memoryStore(), transactional: true });
export const express = expressIdempotency({ store: redisStore({ client: redis }), transactional: true });
export const sql = withIdempotency(async (_request, ctx) => new Response(String(ctx?.tx.inTransaction)), { store: sqliteStore({ database: new Database(':memory:') }), transactional: true });
export const off = withIdempotency(async () => new Response(), { store: memoryStore(), transactional: false });
`;

/** The compiler's messages for SOURCE, one line per diagnostic (chains flattened). */
function diagnostics(): string[] {
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ['lib.es2023.d.ts', 'lib.es2024.string.d.ts', 'lib.dom.d.ts', 'lib.dom.iterable.d.ts'],
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    verbatimModuleSyntax: true,
    customConditions: ['idemkit-source'],
    types: ['node'],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (file, language, ...rest) =>
    file === APP ? ts.createSourceFile(file, SOURCE, language) : getSourceFile(file, language, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (file) => file === APP || fileExists(file);
  const readFile = host.readFile.bind(host);
  host.readFile = (file) => (file === APP ? SOURCE : readFile(file));
  const program = ts.createProgram({ rootNames: [APP], options, host });
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file?.fileName === APP)
    .map((d) => {
      const line = d.file!.getLineAndCharacterOfPosition(d.start!).line;
      return `${SOURCE.split('\n')[line]!.split(' = ')[0]}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
    });
}

describe('transactional: true on a store without transactions', () => {
  it('fails to compile with the message the start-up error gives, on the memory and the Redis store', () => {
    const found = diagnostics();
    expect(found).toHaveLength(2);
    expect(found[0]).toMatch(/^export const web: .*the store has no transactions; use a SQL store \(postgresStore, mysqlStore or sqliteStore\)/);
    expect(found[1]).toMatch(/^export const express: .*the store has no transactions; use a SQL store \(postgresStore, mysqlStore or sqliteStore\)/);
    for (const message of found) expect(message).not.toMatch(/assignable to type 'undefined'/);
    // A whole program over idemkit's sources and four drivers' types: seconds of CPU, more on a shared machine.
  }, 120_000);

  it('and at start-up (for JavaScript, or a store typed loosely), the same words', () => {
    const store: IdempotencyStore = memoryStore();
    const start = () => withIdempotency(async () => new Response(), { store, transactional: true });
    expect(start).toThrow(InvalidOptionError);
    expect(start).toThrow(/`transactional`.*the store "memory" has no transactions; use a SQL store \(postgresStore, mysqlStore or sqliteStore\)/);
  });
});
