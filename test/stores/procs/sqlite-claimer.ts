// A child process that claims keys on a shared SQLite file when the parent says go.
import Database from 'better-sqlite3';
import { sqliteStore } from '../../../src/stores/sqlite/index.js';

const [file, sharedKey, distinctKeys] = process.argv.slice(2) as [string, string, string];
const store = sqliteStore({ database: new Database(file) });
const opts = { leaseMs: 60_000, windowMs: 600_000 };

process.on('message', (message) => void (async () => {
  if (message !== 'go') return;
  const shared = await Promise.all(Array.from({ length: 50 }, () => store.claim({ scope: 's', key: sharedKey }, 'fp', opts)));
  const keys = Number(distinctKeys);
  const distinct = await Promise.all(
    Array.from({ length: keys }, (_, i) => store.claim({ scope: 's', key: `distinct-${i}` }, 'fp', opts)),
  );
  const won = (list: { kind: string }[]) => list.filter((c) => c.kind === 'acquired').length;
  process.send!({ shared: won(shared), distinct: won(distinct) }, () => process.exit(0));
})());
process.send!('ready');
