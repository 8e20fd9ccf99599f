// A child process that races the guards on a shared SQLite file when the parent says go.
import Database from 'better-sqlite3';
import { insertOnce } from '../../../src/patterns/insert-once.js';
import { sqlExecutor } from '../../../src/patterns/sql.js';
import { transition } from '../../../src/patterns/state-machine.js';
import { retryOnVersionConflict, versionedUpdate } from '../../../src/patterns/versioned.js';

const [file, keys, decrements, retries] = process.argv.slice(2).map((v, i) => (i === 0 ? v : Number(v))) as [string, number, number, number];
const raw = new Database(file);
raw.pragma('busy_timeout = 10000');
const db = sqlExecutor(raw);

process.on('message', (message) => void (async () => {
  if (message !== 'go') return;
  let inserted = 0;
  for (let k = 0; k < keys; k++) {
    const results = await Promise.all(
      Array.from({ length: 10 }, () => insertOnce(db, { table: 'payments', values: { out_trade_no: `SO-${k}`, amount: process.pid }, conflict: ['out_trade_no'] })),
    );
    inserted += results.filter((r) => r.inserted).length;
  }
  const moved = await Promise.all(
    Array.from({ length: 10 }, () => transition(db, { table: 'orders', where: { id: 1 }, from: 'PENDING', to: 'PAID' })),
  );
  const decremented = await Promise.all(
    Array.from({ length: decrements }, () =>
      retryOnVersionConflict(
        async () => {
          const { rows } = await db.query<{ stock: number; version: number }>('SELECT stock, version FROM stock WHERE sku = ?', ['A']);
          return versionedUpdate(db, { table: 'stock', where: { sku: 'A' }, expected: rows[0]!.version, set: { stock: rows[0]!.stock - 1 } });
        },
        { retries },
      ),
    ),
  );
  process.send!(
    { inserted, changed: moved.filter((m) => m.changed).length, decremented: decremented.filter((d) => d.updated).length },
    () => process.exit(0),
  );
})());
process.send!('ready');
