-- A periodic limit's rule as budgetd reads it back, {"every", "tz",
-- "start_day"}; NULL for a leaky limit.
CREATE OR REPLACE FUNCTION budgetd_period_json(l limits) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN l.period_every IS NULL THEN NULL
                ELSE jsonb_build_object('every', l.period_every, 'tz', l.period_tz, 'start_day', l.period_start_day) END
$$;
