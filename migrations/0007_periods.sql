-- Calendar periods (SPEC "Calendar periods"): a limit has a leak or a period.
-- A periodic limit keeps its rule (every, tz, start_day) for reading back and
-- period_starts: consecutive period starts in µs, computed by budgetd from its
-- own time-zone database (internal/calendar), never by the database. The
-- functions find the period that contains the database clock's now in it; a
-- now outside it makes budgetd compute a new one around that now.
ALTER TABLE limits ALTER COLUMN leak_amount DROP NOT NULL;
ALTER TABLE limits ALTER COLUMN leak_per_us DROP NOT NULL;
ALTER TABLE limits ADD COLUMN period_every text CHECK (period_every IN ('day', 'week', 'month', 'quarter', 'year'));
ALTER TABLE limits ADD COLUMN period_tz text CHECK (length(period_tz) BETWEEN 1 AND 64);
ALTER TABLE limits ADD COLUMN period_start_day int CHECK (period_start_day BETWEEN 1 AND 28);
ALTER TABLE limits ADD COLUMN period_starts bigint[];
ALTER TABLE limits ADD CONSTRAINT limits_leak_or_period CHECK (
    (period_every IS NULL AND period_tz IS NULL AND period_start_day IS NULL AND period_starts IS NULL
     AND leak_amount IS NOT NULL AND leak_per_us IS NOT NULL)
    OR (period_every IS NOT NULL AND period_tz IS NOT NULL AND period_starts IS NOT NULL
        AND leak_amount IS NULL AND leak_per_us IS NULL));
