-- budgetd's MySQL/MariaDB schema, version 4: a limit's overrides in a table
-- of their own (internal/mysql/overrides.go, docs/mysql.md "Overrides"),
-- out of the limit's spec, so that a PUT or DELETE of one override writes one
-- row rather than every override of the limit, and a decision does not parse
-- them all.
--
-- budgetd_limits.oseq is the sequence number of the limit's last change of
-- its overrides (0: none ever); each change writes its override's row with
-- that number in seq, a delete as a tombstone (body NULL), so that a Store
-- refreshes its copy of a limit's overrides by reading only the rows with a
-- seq above the one it has.
--
-- Idempotent as every file (0001_init.sql): the column is added only when
-- information_schema does not list it (MySQL 8.0 has no ADD COLUMN IF NOT
-- EXISTS), the rows are copied with INSERT IGNORE, and the overrides leave a
-- spec in the same statement that sets its oseq, after the copy: a start that
-- stopped half-way copies nothing twice and loses nothing.

SET @budgetd_ddl = (SELECT IF(COUNT(*) = 0,
  'ALTER TABLE budgetd_limits ADD COLUMN oseq BIGINT UNSIGNED NOT NULL DEFAULT 0', 'DO 0')
  FROM information_schema.columns
  WHERE table_schema = DATABASE() AND table_name = 'budgetd_limits' AND column_name = 'oseq');
PREPARE budgetd_ddl FROM @budgetd_ddl;
EXECUTE budgetd_ddl;
DEALLOCATE PREPARE budgetd_ddl;

-- One row per pattern a limit ever had: body is the override (ledger.Override
-- as JSON, expired ones kept, as rollover and the end of a temporary rule
-- change read them), NULL once deleted.
CREATE TABLE IF NOT EXISTS budgetd_overrides (
  limit_id BIGINT UNSIGNED NOT NULL,
  pattern  VARBINARY(257) NOT NULL,
  seq      BIGINT UNSIGNED NOT NULL,
  body     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  PRIMARY KEY (limit_id, pattern),
  KEY budgetd_overrides_seq (limit_id, seq)
) ENGINE=InnoDB;

INSERT IGNORE INTO budgetd_overrides (limit_id, pattern, seq, body)
  SELECT l.id, CAST(j.pattern AS BINARY), j.n, JSON_EXTRACT(l.spec, CONCAT('$.overrides[', j.n - 1, ']'))
  FROM budgetd_limits l,
    JSON_TABLE(l.spec, '$.overrides[*]' COLUMNS (
      n FOR ORDINALITY,
      pattern VARCHAR(300) CHARACTER SET utf8mb4 PATH '$.Pattern')) j;

UPDATE budgetd_limits SET oseq = JSON_LENGTH(spec, '$.overrides'), spec = JSON_REMOVE(spec, '$.overrides')
  WHERE JSON_CONTAINS_PATH(spec, 'one', '$.overrides');
