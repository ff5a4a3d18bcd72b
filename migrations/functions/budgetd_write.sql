-- Writes a locked bucket of limit p_l: the new level, and updated moved to
-- p_now unless that would move it back. A stored time more than
-- budgetd_clock_step() after p_now can only come from a clock that was
-- stepped back: it is treated as now, so the bucket leaks again from p_now
-- instead of waiting for the clock to catch up. A window bucket's slots are
-- settled to p_now from the row as it was, with p_charge added or p_drain
-- taken (budgetd_window_slots); p_level is then their sum. The rollover
-- carry of p_l (budgetd_with_rollover), when it has one, is kept.
CREATE OR REPLACE FUNCTION budgetd_write(p_l limits, p_key text, p_level numeric, p_now timestamptz,
                                         p_charge numeric DEFAULT 0, p_drain numeric DEFAULT 0) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_l.window_length_us IS NULL THEN
        UPDATE buckets
           SET level = trim_scale(p_level),
               carry_unused = CASE WHEN p_l.rollover_period IS NULL THEN carry_unused ELSE p_l.rollover_unused END,
               carry_period = coalesce(p_l.rollover_period, carry_period),
               updated_at = CASE WHEN updated_at IS NULL OR updated_at < p_now OR updated_at > p_now + budgetd_clock_step()
                                 THEN p_now ELSE updated_at END
         WHERE limit_id = p_l.id AND key = p_key;
        RETURN;
    END IF;
    UPDATE buckets AS b
       SET level = trim_scale(p_level),
           (slot_idx, slot_sum) = (SELECT s.o_idx, s.o_sum
                                     FROM budgetd_window_slots(b.level, b.updated_at, p_l.window_length_us, p_l.window_precision_us,
                                                               b.slot_idx, b.slot_sum, p_now, p_charge, p_drain) AS s),
           updated_at = CASE WHEN b.updated_at IS NULL OR b.updated_at < p_now OR b.updated_at > p_now + budgetd_clock_step()
                             THEN p_now ELSE b.updated_at END
     WHERE b.limit_id = p_l.id AND b.key = p_key;
END $$;
