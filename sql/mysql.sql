-- idemkit records for MySQL 5.7+/8 and MariaDB 10.3+ (idemkit/stores/mysql).
-- The same statement as `store.migrate()` / `mysqlSchema()`; rename the table if you pass `table`.
--
-- scope, idem_key, fingerprint: VARBINARY, so comparisons are byte-exact. Every `_bin` collation of
--   MariaDB and MySQL 5.7 is PAD SPACE ('acct' = 'acct '), which would let two tenants, or the
--   sf-string keys "k" and "k ", share one record.
-- token: the current owner's 128-bit token (hex); complete/checkpoint/release match on it.
-- revision: bumped by every write; claims compare-and-swap on it, and it makes a matching fenced
--   UPDATE always change the row, whatever the connection's CLIENT_FOUND_ROWS flag.
-- lease_until, expires_at: epoch ms on the SERVER's clock (UTC_TIMESTAMP), never an app's.
-- expires_at index: the reaper walks it in bounded batches (DELETE ... ORDER BY expires_at LIMIT n).
-- in_flight index (state, lease_until): the completer's listing (listAbandoned) and an instance
--   restart (endLeasesOf) read a range of it, the records in flight, instead of the whole table.
--   A table created by an earlier idemkit lacks it: `store.migrate()` / `idemkit migrate` adds it
--   online, or run: ALTER TABLE idempotency_records ADD INDEX in_flight (state, lease_until), ALGORITHM = INPLACE, LOCK = NONE;
-- created_at, updated_at: epoch ms on the server's clock when the record was claimed (a take-over
--   keeps it) and last changed; NULL (unknown) in rows written before idemkit kept them.
--   A table created by an earlier idemkit lacks them: `store.migrate()` / `idemkit migrate` adds
--   them, or run: ALTER TABLE idempotency_records ADD COLUMN created_at BIGINT NULL, ADD COLUMN updated_at BIGINT NULL;
CREATE TABLE IF NOT EXISTS `idempotency_records` (
  scope VARBINARY(1024) NOT NULL,
  idem_key VARBINARY(255) NOT NULL,
  fingerprint VARBINARY(255) NOT NULL,
  state ENUM('in_flight', 'completed') NOT NULL,
  token VARBINARY(32) NOT NULL,
  revision BIGINT UNSIGNED NOT NULL,
  attempt INT UNSIGNED NOT NULL,
  lease_until BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  recovery_point MEDIUMTEXT NULL,
  recovery_data MEDIUMTEXT NULL,
  status SMALLINT UNSIGNED NULL,
  headers MEDIUMTEXT NULL,
  body LONGBLOB NULL,
  body_omitted TINYINT(1) NOT NULL DEFAULT 0,
  created_at BIGINT NULL,
  updated_at BIGINT NULL,
  PRIMARY KEY (scope, idem_key),
  KEY expires_at (expires_at),
  KEY in_flight (state, lease_until)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
