-- Rolling windows (SPEC "Rolling windows"): a limit has exactly one of a
-- leak, a calendar period or a window. A window limit keeps its length and
-- the precision of its slots in whole microseconds (the precision divides the
-- length into at most 1000 slots, ledger.MaxWindowSlots).
--
-- A window bucket keeps its counting slots on its row, oldest first: slot_idx
-- the slot numbers (slot i covers [i × precision, (i+1) × precision) µs since
-- the epoch) and slot_sum the sums charged in them, both NULL for no slots
-- (every bucket of a leaky or periodic limit). Every write keeps only the
-- slots that still count, at most length/precision + 1 of them, so a bucket's
-- state stays bounded whatever its traffic; level is their sum as of
-- updated_at (package bucket's State).
ALTER TABLE limits ADD COLUMN window_length_us bigint CHECK (window_length_us > 0);
ALTER TABLE limits ADD COLUMN window_precision_us bigint CHECK (window_precision_us > 0);
ALTER TABLE limits DROP CONSTRAINT limits_leak_or_period;
ALTER TABLE limits ADD CONSTRAINT limits_one_kind CHECK (
    (leak_amount IS NOT NULL AND leak_per_us IS NOT NULL
     AND period_every IS NULL AND period_tz IS NULL AND period_start_day IS NULL AND period_starts IS NULL
     AND window_length_us IS NULL AND window_precision_us IS NULL)
    OR (period_every IS NOT NULL AND period_tz IS NOT NULL AND period_starts IS NOT NULL
        AND leak_amount IS NULL AND leak_per_us IS NULL
        AND window_length_us IS NULL AND window_precision_us IS NULL)
    OR (window_length_us IS NOT NULL AND window_precision_us IS NOT NULL
        AND window_length_us % window_precision_us = 0 AND window_length_us / window_precision_us <= 1000
        AND leak_amount IS NULL AND leak_per_us IS NULL
        AND period_every IS NULL AND period_tz IS NULL AND period_start_day IS NULL AND period_starts IS NULL));

ALTER TABLE buckets ADD COLUMN slot_idx bigint[];
ALTER TABLE buckets ADD COLUMN slot_sum numeric[];
ALTER TABLE buckets ADD CONSTRAINT buckets_slots CHECK (
    (slot_idx IS NULL AND slot_sum IS NULL)
    OR (cardinality(slot_idx) = cardinality(slot_sum) AND cardinality(slot_idx) BETWEEN 1 AND 1001));
