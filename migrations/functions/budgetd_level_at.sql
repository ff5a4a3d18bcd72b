-- The level at p_now (bucket.LevelAt), the one place the leak is written:
--   leaked(dt) = floor(amount × dt_µs / per_µs, 12 fractional digits)
--   level(now) = max(0, level − leaked(now − updated))
-- A bucket never written (NULL) is empty; an updated time at or after p_now
-- (a clock that went back) leaks nothing. For a periodic limit p_start is the
-- start (µs) of the period that contains p_now (budgetd_period_start): the
-- level is the stored one when the bucket was written in that period or
-- later, else zero; it does not leak (a periodic limit is the one without
-- a leak: p_per NULL). For a window limit (p_wlen, p_wprec: its length and
-- precision in µs) it is the sum of the slots p_idx, p_sum that still count
-- (budgetd_window_level). A plain SQL expression, so that PostgreSQL inlines
-- it into the statement that calls it: it reads p_start once, because the
-- planner does not inline a function that reads twice an argument as costly
-- as a call (budgetd_period_start); not inlined, its body is parsed and
-- planned again in every transaction.
CREATE OR REPLACE FUNCTION budgetd_level_at(p_level numeric, p_updated timestamptz, p_amount numeric, p_per bigint, p_now timestamptz,
                                            p_start bigint DEFAULT NULL, p_wlen bigint DEFAULT NULL, p_wprec bigint DEFAULT NULL,
                                            p_idx bigint[] DEFAULT NULL, p_sum numeric[] DEFAULT NULL)
RETURNS numeric LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_level IS NULL THEN 0
        WHEN p_wlen IS NOT NULL THEN budgetd_window_level(p_level, p_updated, p_wlen, p_wprec, p_idx, p_sum, p_now)
        WHEN p_per IS NULL THEN
            CASE WHEN p_level > 0 AND budgetd_us(p_updated) >= p_start THEN p_level ELSE 0 END
        WHEN p_level <= 0 OR p_updated IS NULL OR p_now <= p_updated THEN greatest(p_level, 0)
        ELSE greatest(p_level - div(p_amount * (budgetd_us(p_now) - budgetd_us(p_updated)) * 1000000000000, p_per)
                                * 0.000000000001, 0)
    END
$$;
