-- Rollover (SPEC "Terms per customer", docs/terms.md "Rollover"): a
-- periodic limit's rollover_max (NULL: no rollover), and each bucket's
-- carry (ledger.Carry): carry_unused, the capacity it left unused at the end
-- of the period before the one it was last written in (uncapped by the max),
-- received in the period that starts at carry_period (µs); NULL for none.
-- limits.rollover_unused, rollover_period and rollover are NULL in every
-- stored row: a limit value with a bucket's rollover applied to its capacity
-- (budgetd_terms, budgetd_with_rollover) holds there the carry to keep at
-- the write and the rollover received.
ALTER TABLE limits ADD COLUMN rollover_max numeric CHECK (rollover_max >= 0 AND rollover_max <= 1000000000000);
ALTER TABLE limits ADD COLUMN rollover_unused numeric;
ALTER TABLE limits ADD COLUMN rollover_period bigint;
ALTER TABLE limits ADD COLUMN rollover numeric;
ALTER TABLE buckets ADD COLUMN carry_unused numeric;
ALTER TABLE buckets ADD COLUMN carry_period bigint;
