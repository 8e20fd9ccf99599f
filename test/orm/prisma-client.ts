/**
 * A Prisma client for one test's tables, generated on the spot: Prisma clients are code generated
 * from a schema, and the tests' table names are made per run. `prisma generate` runs offline: the
 * CLI insists that a schema engine binary exists but generate never runs it, so
 * PRISMA_SCHEMA_ENGINE_BINARY points it at /bin/true (the real one is a download we cannot make,
 * and is only needed by migrate / db push, which the tests replace with plain SQL).
 * A failed generation throws: the prisma combination fails, it is never skipped.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PrismaPg } from '@prisma/adapter-pg';

/** Git-ignored, outside tsconfig's checks and eslint's: generated code, removed after each run. */
export const GENERATED = join(import.meta.dirname, 'prisma', 'generated');
const root = join(import.meta.dirname, '..', '..');

/** The parts of the generated client the tests use (its own types live in the generated code). */
export interface TestPrismaClient {
  order: { create(args: { data: { key: string } }): Promise<unknown>; count(args: { where: { key: string } }): Promise<number> };
  thing: { findUnique(args: { where: { id: string } }): Promise<{ status: string } | null> };
  $transaction<R>(fn: (tx: TestPrismaTransaction) => Promise<R>, options?: { maxWait?: number; timeout?: number }): Promise<R>;
  $executeRawUnsafe(sql: string, ...values: unknown[]): Promise<number>;
  $disconnect(): Promise<void>;
}
export type TestPrismaTransaction = Omit<TestPrismaClient, '$transaction' | '$disconnect'> & { $queryRawUnsafe(sql: string, ...values: unknown[]): Promise<unknown> };

function schema(orders: string, things: string): string {
  return `generator client {
  provider = "prisma-client"
  output   = "./client"
}

datasource db {
  provider = "postgresql"
}

model Order {
  id  Int    @id @default(autoincrement())
  key String
  @@map("${orders}")
}

model Thing {
  id     String @id
  status String
  @@map("${things}")
}
`;
}

/** Generates (once per name) and loads the client for `orders` and `things`; connects with @prisma/adapter-pg. */
export async function prismaClient(name: string, orders: string, things: string, connectionString: string): Promise<TestPrismaClient> {
  const dir = join(GENERATED, name);
  const client = join(dir, 'client', 'client.ts');
  if (!existsSync(client)) {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'schema.prisma'), schema(orders, things));
    const generated = spawnSync(join(root, 'node_modules', '.bin', 'prisma'), ['generate', '--schema', join(dir, 'schema.prisma')], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/true', PRISMA_HIDE_UPDATE_MESSAGE: '1', CHECKPOINT_DISABLE: '1' },
      timeout: 120_000,
    });
    if (generated.status !== 0 || !existsSync(client)) {
      throw new Error(`prisma generate failed (status ${generated.status}, ${generated.error?.message ?? 'no spawn error'}):\n${generated.stdout}\n${generated.stderr}`);
    }
  }
  const { PrismaClient } = (await import(client)) as { PrismaClient: new (options: { adapter: PrismaPg }) => TestPrismaClient };
  return new PrismaClient({ adapter: new PrismaPg({ connectionString }) });
}

export function removeGenerated(name: string): void {
  rmSync(join(GENERATED, name), { recursive: true, force: true });
}
