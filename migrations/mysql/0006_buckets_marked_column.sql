-- budgetd's MySQL/MariaDB schema, version 6: th_marked (0005) becomes a
-- plain column that budgetd writes with extra (internal/mysql decide.go,
-- marked), the same value: the signature of the list a bucket's marks are
-- of when one of them is above, NULL otherwise. As a virtual column it was
-- computed from extra's JSON at every write of a row with marks, two
-- JSON_EXTRACTs that cost MariaDB about 10 µs of CPU a decision on a limit
-- with thresholds (docs/mysql.md, "Thresholds"). budgetd_buckets_marked
-- indexes it as before.
--
-- Idempotent as every file (0001_init.sql): the column is replaced only
-- while information_schema lists it as generated, and the UPDATE that fills
-- it from extra gives the same values when run again. An older budgetd
-- still running writes extra without th_marked: its buckets' marks are
-- listed near the cap again at their next write by this one (docs/mysql.md).

SET @budgetd_ddl = (SELECT IF(COUNT(*) = 1,
  'ALTER TABLE budgetd_buckets DROP INDEX budgetd_buckets_marked, DROP COLUMN th_marked, ADD COLUMN th_marked BIGINT UNSIGNED NULL AFTER extra, ADD INDEX budgetd_buckets_marked (limit_id, th_marked, bkey)',
  'DO 0')
  FROM information_schema.columns
  WHERE table_schema = DATABASE() AND table_name = 'budgetd_buckets' AND column_name = 'th_marked' AND extra LIKE '%GENERATED%');
PREPARE budgetd_ddl FROM @budgetd_ddl;
EXECUTE budgetd_ddl;
DEALLOCATE PREPARE budgetd_ddl;

UPDATE budgetd_buckets
  SET th_marked = IF(CAST(JSON_EXTRACT(extra, '$.marks.Above') AS UNSIGNED) > 0, CAST(JSON_EXTRACT(extra, '$.marks.Sig') AS UNSIGNED), NULL)
  WHERE extra IS NOT NULL;
