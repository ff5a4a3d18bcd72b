-- p_l with the terms of its override p_o (ledger.Override.Apply): the
-- capacity, a leaky limit's leak rate, a periodic limit's tz and start_day
-- (with the override's table of period starts), a window limit's length and
-- precision; a term of another kind than the limit's is not applied. The
-- result names the pattern in its override column. A table of period starts
-- made for another period than the limit's now (the limit's period changed)
-- raises period_table, as a table that does not reach p_now does: budgetd
-- computes new tables for the limit and its overrides and retries.
CREATE OR REPLACE FUNCTION budgetd_with_override(p_l limits, p_o overrides, p_now timestamptz) RETURNS limits
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_tz text;
    v_sd int;
BEGIN
    IF p_o.limit_id IS NULL THEN
        RETURN p_l;
    END IF;
    p_l.override := p_o.pattern;
    p_l.capacity := coalesce(p_o.capacity, p_l.capacity);
    IF p_l.period_every IS NULL AND p_l.window_length_us IS NULL AND p_o.leak_per_us IS NOT NULL THEN
        p_l.leak_amount := p_o.leak_amount;
        p_l.leak_per_us := p_o.leak_per_us;
    END IF;
    IF p_l.period_every IS NOT NULL AND (p_o.period_tz IS NOT NULL OR p_o.period_start_day IS NOT NULL) THEN
        v_tz := coalesce(p_o.period_tz, p_l.period_tz);
        v_sd := coalesce(p_o.period_start_day, p_l.period_start_day);
        IF p_o.period_key IS DISTINCT FROM budgetd_period_key(p_l.period_every, v_tz, v_sd) THEN
            RAISE EXCEPTION 'limit %: an override''s table of period starts is for another period', p_l.name
                USING ERRCODE = budgetd_code_period_table(), DETAIL = p_l.id || ' ' || budgetd_us(p_now);
        END IF;
        p_l.period_tz := v_tz;
        p_l.period_start_day := v_sd;
        p_l.period_starts := p_o.period_starts;
    END IF;
    IF p_l.window_length_us IS NOT NULL AND p_o.window_length_us IS NOT NULL THEN
        p_l.window_length_us := p_o.window_length_us;
        p_l.window_precision_us := p_o.window_precision_us;
    END IF;
    RETURN p_l;
END $$;

-- The period a table of period starts is made for, as overrides.period_key
-- keeps it.
CREATE OR REPLACE FUNCTION budgetd_period_key(p_every text, p_tz text, p_start_day int) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_every || ' ' || p_tz || ' ' || coalesce(p_start_day::text, '')
$$;
