-- budgetd's MySQL/MariaDB schema, version 5: who is near the cap (SPEC "Who
-- is near the cap", docs/api.md). A bucket keeps its threshold marks in the
-- JSON of extra ({"marks":{"Sig":…,"Above":…,"Period":…}}, internal/mysql
-- state.go); th_marked is the signature of the list its marks are of when
-- one of them is above, NULL otherwise, a virtual column computed from extra,
-- and budgetd_buckets_marked indexes it by limit and key, so that a listing
-- past a threshold reads only the marked buckets of the limit's list
-- (ListMarked). The index changes only when a bucket's marks change from or
-- to none above.
--
-- Idempotent as every file (0001_init.sql): the column and the index are
-- added only when information_schema does not list them.

SET @budgetd_ddl = (SELECT IF(COUNT(*) = 0,
  'ALTER TABLE budgetd_buckets ADD COLUMN th_marked BIGINT UNSIGNED AS (IF(CAST(JSON_EXTRACT(extra, ''$.marks.Above'') AS UNSIGNED) > 0, CAST(JSON_EXTRACT(extra, ''$.marks.Sig'') AS UNSIGNED), NULL)) VIRTUAL',
  'DO 0')
  FROM information_schema.columns
  WHERE table_schema = DATABASE() AND table_name = 'budgetd_buckets' AND column_name = 'th_marked');
PREPARE budgetd_ddl FROM @budgetd_ddl;
EXECUTE budgetd_ddl;
DEALLOCATE PREPARE budgetd_ddl;

SET @budgetd_ddl = (SELECT IF(COUNT(*) = 0,
  'CREATE INDEX budgetd_buckets_marked ON budgetd_buckets (limit_id, th_marked, bkey)', 'DO 0')
  FROM information_schema.statistics
  WHERE table_schema = DATABASE() AND table_name = 'budgetd_buckets' AND index_name = 'budgetd_buckets_marked');
PREPARE budgetd_ddl FROM @budgetd_ddl;
EXECUTE budgetd_ddl;
DEALLOCATE PREPARE budgetd_ddl;
