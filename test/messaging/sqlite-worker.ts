/** One of several processes consuming the same ids on one SQLite file (sqlite-processes.test.ts). */
import Database from 'better-sqlite3';
import { consumeOnce } from '../../src/messaging/index.js';
import { sqlExecutor } from '../../src/patterns/sql.js';

const db = new Database(process.env.FILE!);
db.pragma('busy_timeout = 10000');
const exec = sqlExecutor(db);
const table = process.env.TABLE!;
const effects = process.env.EFFECTS!;
const ids = Array.from({ length: Number(process.env.COUNT) }, (_, i) => `id-${i}`).sort(() => Math.random() - 0.5);
const results = await Promise.all(
  ids.map((id) =>
    consumeOnce({ db: exec, table, consumer: 'procs', messageId: id }, async (tx) => {
      await tx.query(`INSERT INTO ${effects} (message_id, pid) VALUES (?, ?)`, [id, process.pid]);
    }),
  ),
);
console.log(JSON.stringify({ processed: results.filter((r) => r.status === 'processed').length, duplicates: results.filter((r) => r.status === 'duplicate').length }));
db.close();
