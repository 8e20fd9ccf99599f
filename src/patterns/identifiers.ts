/**
 * Table and column names are spliced into SQL, so they are checked and quoted; values never are
 * (they are always bound parameters).
 */
import { InvalidOptionError } from '../core/errors.js';
import type { SqlDialect } from '../drivers/sql-executor.js';

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
// PostgreSQL truncates names past 63 bytes, MySQL refuses them past 64: refuse both up front.
const MAX_NAME = 63;

/** Checks a column name and quotes it for the dialect. */
export function column(field: string, name: unknown, dialect: SqlDialect): string {
  if (typeof name !== 'string' || !NAME.test(name) || name.length > MAX_NAME) {
    throw new InvalidOptionError(field, `expected a plain SQL identifier (letters, digits, _; not starting with a digit; at most ${MAX_NAME}), got ${JSON.stringify(name)}`);
  }
  return quote(name, dialect);
}

/** Checks a table name, optionally schema-qualified (`schema.table`), and quotes each part. */
export function table(field: string, name: unknown, dialect: SqlDialect): string {
  if (typeof name !== 'string') throw new InvalidOptionError(field, `expected a table name, got ${typeof name}`);
  const parts = name.split('.');
  if (parts.length > 2) throw new InvalidOptionError(field, `expected \`table\` or \`schema.table\`, got ${JSON.stringify(name)}`);
  return parts.map((part) => column(field, part, dialect)).join('.');
}

// Quoted, a name that is also a keyword (order, user, group) still works. In PostgreSQL a quoted
// name is case-sensitive: pass names as they are stored (lower case for tables created unquoted).
function quote(name: string, dialect: SqlDialect): string {
  return dialect === 'mysql' ? `\`${name}\`` : `"${name}"`;
}

/** A record of column → value, checked: a plain object with at least one entry and no undefined value. */
export function entries(field: string, value: unknown, dialect: SqlDialect, allowEmpty = false): Array<[string, unknown]> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidOptionError(field, 'expected an object of column -> value');
  }
  const list = Object.entries(value);
  if (list.length === 0 && !allowEmpty) throw new InvalidOptionError(field, 'expected at least one column');
  return list.map(([name, v]) => {
    const quoted = column(`${field}.${name}`, name, dialect);
    if (v === undefined) throw new InvalidOptionError(`${field}.${name}`, 'is undefined (use null for SQL NULL)');
    return [quoted, v];
  });
}

/** `a = ? AND b IS NULL …` for a `where` object; NULL matches with IS NULL. */
export function whereClause(field: string, where: unknown, dialect: SqlDialect): { sql: string; params: unknown[] } {
  const list = entries(field, where, dialect);
  const params: unknown[] = [];
  const sql = list
    .map(([name, v]) => {
      if (v === null) return `${name} IS NULL`;
      params.push(v);
      return `${name} = ?`;
    })
    .join(' AND ');
  return { sql, params };
}
