-- The period a table of period starts is made for, as overrides.period_key
-- keeps it.
CREATE OR REPLACE FUNCTION budgetd_period_key(p_every text, p_tz text, p_start_day int) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_every || ' ' || p_tz || ' ' || coalesce(p_start_day::text, '')
$$;
