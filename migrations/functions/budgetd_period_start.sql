-- The start, in µs, of the period of p_l that contains p_now: NULL for a
-- leaky limit. It is found by binary search in the limit's table of period
-- starts (budgetd computes the table; the database never computes a
-- calendar). A now outside the table raises period_table with the limit's id
-- and now in the detail, "<id> <now µs>": budgetd computes a table around
-- that now and retries. With p_strict false it answers NULL instead.
CREATE OR REPLACE FUNCTION budgetd_period_start(p_l limits, p_now timestamptz, p_strict boolean DEFAULT true)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_s   bigint[] := p_l.period_starts;
    v_now bigint;
    v_lo  int;
    v_hi  int;
    v_mid int;
BEGIN
    IF p_l.period_every IS NULL THEN
        RETURN NULL;
    END IF;
    v_now := budgetd_us(p_now);
    v_lo := 1;
    v_hi := coalesce(array_length(v_s, 1), 0);
    IF v_hi < 2 OR v_now < v_s[v_lo] OR v_now >= v_s[v_hi] THEN
        IF NOT p_strict THEN
            RETURN NULL;
        END IF;
        RAISE EXCEPTION 'limit %: the clock is outside its table of period starts', p_l.name
            USING ERRCODE = budgetd_code_period_table(), DETAIL = p_l.id || ' ' || v_now;
    END IF;
    -- v_s[v_lo] <= now < v_s[v_hi]
    WHILE v_hi - v_lo > 1 LOOP
        v_mid := (v_lo + v_hi) / 2;
        IF v_s[v_mid] <= v_now THEN
            v_lo := v_mid;
        ELSE
            v_hi := v_mid;
        END IF;
    END LOOP;
    RETURN v_s[v_lo];
END $$;
