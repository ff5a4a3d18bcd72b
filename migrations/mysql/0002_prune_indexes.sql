-- budgetd's MySQL/MariaDB schema, version 2: the indexes the pruner's scans
-- need (internal/mysql/prune.go, docs/mysql.md "Pruning"), so that each of
-- its bounded batches reads the rows it deletes rather than its table from
-- the start.
--
-- MySQL 8.0 has no CREATE INDEX IF NOT EXISTS (MariaDB has), so each index is
-- created by a prepared statement only when information_schema does not list
-- it yet: the file stays idempotent, as the runner needs (0001_init.sql).

-- Expired active holds (state = 'active' AND expires_us <= now) and closed
-- holds past their retention (state IN ('committed', 'released', 'expired')
-- AND expires_us < … AND resolved_us < …): three ranges of the index, as a
-- closed hold was resolved at or before its expiry.
SET @budgetd_ddl = (SELECT IF(COUNT(*) = 0,
  'CREATE INDEX budgetd_holds_expiry ON budgetd_holds (state, expires_us)', 'DO 0')
  FROM information_schema.statistics
  WHERE table_schema = DATABASE() AND table_name = 'budgetd_holds' AND index_name = 'budgetd_holds_expiry');
PREPARE budgetd_ddl FROM @budgetd_ddl;
EXECUTE budgetd_ddl;
DEALLOCATE PREPARE budgetd_ddl;

-- History past its retention (at_us < now - 30 days).
SET @budgetd_ddl = (SELECT IF(COUNT(*) = 0,
  'CREATE INDEX budgetd_history_at ON budgetd_history (at_us)', 'DO 0')
  FROM information_schema.statistics
  WHERE table_schema = DATABASE() AND table_name = 'budgetd_history' AND index_name = 'budgetd_history_at');
PREPARE budgetd_ddl FROM @budgetd_ddl;
EXECUTE budgetd_ddl;
DEALLOCATE PREPARE budgetd_ddl;

-- Idempotency records past their retention (created_us < now - 25 h).
SET @budgetd_ddl = (SELECT IF(COUNT(*) = 0,
  'CREATE INDEX budgetd_idempotency_created ON budgetd_idempotency (created_us)', 'DO 0')
  FROM information_schema.statistics
  WHERE table_schema = DATABASE() AND table_name = 'budgetd_idempotency' AND index_name = 'budgetd_idempotency_created');
PREPARE budgetd_ddl FROM @budgetd_ddl;
EXECUTE budgetd_ddl;
DEALLOCATE PREPARE budgetd_ddl;

-- Events past their retention (at_us < now - 7 days).
SET @budgetd_ddl = (SELECT IF(COUNT(*) = 0,
  'CREATE INDEX budgetd_events_at ON budgetd_events (at_us)', 'DO 0')
  FROM information_schema.statistics
  WHERE table_schema = DATABASE() AND table_name = 'budgetd_events' AND index_name = 'budgetd_events_at');
PREPARE budgetd_ddl FROM @budgetd_ddl;
EXECUTE budgetd_ddl;
DEALLOCATE PREPARE budgetd_ddl;
