-- budgetd_period_find: the last of the period starts p_starts (µs,
-- increasing) at or before p_now, by binary search; a now outside the table
-- raises period_table with "<limit id> <now µs>" in the detail (see
-- budgetd_period_start).
CREATE OR REPLACE FUNCTION budgetd_period_find(p_starts bigint[], p_now timestamptz, p_name text, p_id bigint)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_now bigint := budgetd_us(p_now);
    v_lo  int := 1;
    v_hi  int := coalesce(array_length(p_starts, 1), 0);
    v_mid int;
BEGIN
    IF v_hi < 2 OR v_now < p_starts[v_lo] OR v_now >= p_starts[v_hi] THEN
        RAISE EXCEPTION 'limit %: the clock is outside its table of period starts', p_name
            USING ERRCODE = budgetd_code_period_table(), DETAIL = p_id || ' ' || v_now;
    END IF;
    -- p_starts[v_lo] <= now < p_starts[v_hi]
    WHILE v_hi - v_lo > 1 LOOP
        v_mid := (v_lo + v_hi) / 2;
        IF p_starts[v_mid] <= v_now THEN
            v_lo := v_mid;
        ELSE
            v_hi := v_mid;
        END IF;
    END LOOP;
    RETURN p_starts[v_lo];
END $$;
