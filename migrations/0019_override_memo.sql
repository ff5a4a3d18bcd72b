-- The override a bucket's last decision applied, remembered in the bucket's
-- row (issue 26; docs/postgres.md "Overrides"), so that the next decision on
-- the bucket skips the probe of the limit's overrides while they have not
-- changed:
--   limits.override_ver: a counter of the changes of the limit's overrides,
--     one more at every PUT and DELETE of one (budgetd_put_override); NULL
--     before the first;
--   buckets.ov_ver: the limit's override_ver that the decision read, NULL
--     for nothing remembered; ov_pattern the override that applied (NULL for
--     none) and ov_capacity its capacity (NULL: the limit's). Only an override
--     of capacity alone and without expiry is remembered, and only while no
--     override of the limit has an expiry still to come (override_expiry at
--     or before now): no time can then change which override applies.
-- A decision (budgetd_fillup_batch) uses them when ov_ver equals the limit's
-- override_ver; every other reader and writer of a bucket ignores them.
ALTER TABLE limits ADD COLUMN override_ver bigint;
ALTER TABLE buckets ADD COLUMN ov_ver bigint;
ALTER TABLE buckets ADD COLUMN ov_pattern text COLLATE "C";
ALTER TABLE buckets ADD COLUMN ov_capacity numeric;
UPDATE limits SET override_ver = 1 WHERE cardinality(override_lens) > 0;
