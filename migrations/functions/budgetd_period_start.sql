-- The start, in µs, of the period of p_l that contains p_now: NULL for a
-- leaky limit. It is found by binary search in the limit's table of period
-- starts (budgetd computes the table; the database never computes a
-- calendar). A now outside the table raises period_table with the limit's id
-- and now in the detail, "<id> <now µs>": budgetd computes a table around
-- that now and retries. With p_strict false it answers NULL instead.
CREATE OR REPLACE FUNCTION budgetd_period_start(p_l limits, p_now timestamptz, p_strict boolean DEFAULT true)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_l.period_every IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT p_strict AND (coalesce(array_length(p_l.period_starts, 1), 0) < 2
                         OR budgetd_us(p_now) < p_l.period_starts[1]
                         OR budgetd_us(p_now) >= p_l.period_starts[array_length(p_l.period_starts, 1)]) THEN
        RETURN NULL;
    END IF;
    RETURN budgetd_period_find(p_l.period_starts, p_now, p_l.name, p_l.id);
END $$;
