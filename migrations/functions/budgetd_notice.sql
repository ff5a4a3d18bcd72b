-- Runs the threshold rule (budgetd_cross) after a write that took the locked
-- bucket p_key of limit p_l from use p_before (budgetd_used just before the
-- write) to its state now. A write calls it only for a limit with thresholds.
CREATE OR REPLACE FUNCTION budgetd_notice(p_l limits, p_key text, p_before numeric, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_b buckets;
BEGIN
    SELECT * INTO v_b FROM buckets WHERE limit_id = p_l.id AND key = p_key;
    PERFORM budgetd_cross(p_l, p_key, v_b.th_sig, v_b.th_above, v_b.th_period, p_before,
                          ARRAY[budgetd_used(p_l, p_key, p_now)], p_now, budgetd_period_start(p_l, p_now));
END $$;
