-- Settles a locked bucket to p_now (bucket.Settled): records expired holds and
-- returns the level at p_now. The caller writes it with budgetd_write.
CREATE OR REPLACE FUNCTION budgetd_settle(p_l limits, p_key text, p_now timestamptz) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    v_b buckets;
BEGIN
    SELECT * INTO v_b FROM buckets WHERE limit_id = p_l.id AND key = p_key;
    PERFORM budgetd_expire_holds(p_l, p_key, p_now);
    IF v_b.updated_at > p_now THEN
        PERFORM budgetd_note_step(v_b.updated_at, p_now);
    END IF;
    RETURN budgetd_level_at(v_b.level, v_b.updated_at, p_l.leak_amount, p_l.leak_per_us, p_now, budgetd_period_start(p_l, p_now),
                            p_l.window_length_us, p_l.window_precision_us, v_b.slot_idx, v_b.slot_sum);
END $$;
