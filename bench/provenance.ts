/** Where a bench run's numbers come from: the code measured, the machine's load, the versions of what ran. */
import { execSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, statSync } from 'node:fs';

/** A hash of src/ as measured (src/ may differ from the commit while others work), and the commit. */
export function srcHash(): string {
  const hash = createHash('sha256');
  const root = new URL('../src/', import.meta.url);
  for (const file of readdirSync(root, { recursive: true, encoding: 'utf8' }).sort()) {
    const url = new URL(file, root);
    if (statSync(url).isFile()) hash.update(file).update(readFileSync(url));
  }
  return hash.digest('hex').slice(0, 12);
}

export function gitHead(): string {
  try {
    const sha = execSync('git rev-parse --short HEAD', { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const dirty = execSync('git status --porcelain -- src', { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    return `${sha}${dirty ? ' + uncommitted src/ changes' : ''}`;
  } catch {
    return 'unknown commit';
  }
}

function packageVersion(name: string): string {
  try {
    const url = new URL(`../node_modules/${name}/package.json`, import.meta.url);
    return (JSON.parse(readFileSync(url, 'utf8')) as { version: string }).version;
  } catch {
    return 'not installed';
  }
}

/** The versions of the frameworks, drivers and peers the run used, as installed. */
export function packageVersions(): Record<string, string> {
  return Object.fromEntries(
    [
      'fastify',
      'express',
      'koa',
      '@koa/router',
      '@nestjs/core',
      '@nestjs/platform-express',
      'autocannon',
      'ioredis',
      'pg',
      'better-sqlite3',
      '@node-idempotency/core',
      '@node-idempotency/storage-adapter-memory',
      '@node-idempotency/storage-adapter-redis',
      'redis',
      'express-idempotency',
      'express-idempotency-redis-adapter',
      '@aws-lambda-powertools/idempotency',
      '@redis/client',
    ].map((name) => [name, packageVersion(name)]),
  );
}

export function readLoadAverage(): string {
  try {
    return readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  } catch {
    return 'n/a';
  }
}
