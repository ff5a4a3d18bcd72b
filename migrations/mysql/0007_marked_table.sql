-- budgetd's MySQL/MariaDB schema, version 7: the buckets with a mark above
-- get a table of their own in place of the index budgetd_buckets_marked
-- (0005, 0006). MariaDB has no partial index, so that index held an entry
-- for every bucket, marked or not: 44 of the 222 bytes of an idle bucket
-- (docs/mysql.md, "Bytes per idle bucket"). budgetd_marked holds a row
-- (limit, signature, key) for each bucket whose th_marked is that
-- signature, written in the transaction that changes th_marked, after the
-- bucket's row (internal/mysql decide.go, writeMarks), and deleted with
-- the bucket by the pruner. A listing past a threshold reads it in key
-- order and joins the bucket rows, keeping those whose th_marked is still
-- the signature: th_marked stays the truth, the table a superset of it.
--
-- Idempotent as every file (0001_init.sql): the table is created only when
-- missing, the copy from th_marked gives the same rows when run again, and
-- the index is dropped only while information_schema lists it. An older
-- budgetd still running writes th_marked without a row here: a bucket
-- whose marks it sets above is listed near the cap from its next write by
-- this one (docs/mysql.md).

CREATE TABLE IF NOT EXISTS budgetd_marked (
  limit_id BIGINT UNSIGNED NOT NULL,
  sig      INT UNSIGNED NOT NULL,
  bkey     VARBINARY(256) NOT NULL,
  PRIMARY KEY (limit_id, sig, bkey)
) ENGINE=InnoDB;

INSERT IGNORE INTO budgetd_marked (limit_id, sig, bkey)
  SELECT limit_id, th_marked, bkey FROM budgetd_buckets WHERE th_marked IS NOT NULL;

SET @budgetd_ddl = (SELECT IF(COUNT(*) > 0,
  'ALTER TABLE budgetd_buckets DROP INDEX budgetd_buckets_marked', 'DO 0')
  FROM information_schema.statistics
  WHERE table_schema = DATABASE() AND table_name = 'budgetd_buckets' AND index_name = 'budgetd_buckets_marked');
PREPARE budgetd_ddl FROM @budgetd_ddl;
EXECUTE budgetd_ddl;
DEALLOCATE PREPARE budgetd_ddl;
