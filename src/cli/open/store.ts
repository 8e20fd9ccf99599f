// Opens the store a URL names, with the opener of its backend. Each opener imports its driver and
// its store only when called: the drivers are optional peer dependencies.
import type { StoreNames, StoreUrl } from '../store-url.js';
import type { OpenedStore } from './driver.js';
import { openDynamodb } from './dynamodb.js';
import { openMysql } from './mysql.js';
import { openPostgres } from './postgres.js';
import { openRedis } from './redis.js';
import { openSqlite } from './sqlite.js';

/** Opens the store of `url`, connecting to check it answers (a SQLite file must exist unless `create`). */
export async function openStore(url: StoreUrl, names: StoreNames, options: { create: boolean }): Promise<OpenedStore> {
  switch (url.kind) {
    case 'sqlite':
      return openSqlite(url, names, options.create);
    case 'postgres':
      return openPostgres(url, names);
    case 'mysql':
      return openMysql(url, names);
    case 'redis':
      return openRedis(url, names);
    case 'dynamodb':
      return openDynamodb(url, names);
  }
}
