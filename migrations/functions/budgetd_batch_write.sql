-- Writes the bucket p_key (p_b: its locked row as stored, the NULL row for
-- none) of the limit p_l (its terms) once, after the decisions of one
-- budgetd_fillup_batch at p_now; false when a concurrent call created the
-- row first (the batch then starts over on it). With p_wrote (something was
-- charged): expired holds recorded when there are (p_expired), and the row
-- given the level p_level, the slots p_idx, p_sum (a window's, once
-- written), the rollover carry of p_l, updated moved to p_now unless that
-- would move it back (a stored time more than budgetd_clock_step() ahead is
-- a clock stepped back: now), and the threshold marks while no event is due
-- (from the uses p_before and p_afters and the period start p_start; see
-- budgetd_batch_marks); budgetd_cross otherwise, after it. A row without slots or
-- carry, before or after, is written without those columns. Without
-- p_wrote, a row from a clock stepped back is moved to p_now
-- (budgetd_unstep), and a bucket with no row gets an empty placeholder,
-- inserted and deleted, which proves that no concurrent call created it
-- since the batch's snapshot: a denial is judged on a locked state, as
-- everywhere (docs/postgres.md, "Locking").
CREATE OR REPLACE FUNCTION budgetd_batch_write(p_l limits, p_b buckets, p_key text, p_wrote boolean, p_level numeric,
                                               p_idx bigint[], p_sum numeric[], p_expired bigint, p_before numeric,
                                               p_afters numeric[], p_start bigint, p_now timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_marks bigint[];  -- {th_sig, th_above, th_period} to write; NULL: as stored
BEGIN
    IF NOT p_wrote THEN
        IF p_b.updated_at > p_now + budgetd_clock_step() THEN
            UPDATE buckets SET updated_at = p_now WHERE limit_id = p_l.id AND key = p_key;
        ELSIF p_b.limit_id IS NULL THEN
            INSERT INTO buckets (limit_id, key, level, updated_at) VALUES (p_l.id, p_key, 0, NULL) ON CONFLICT DO NOTHING;
            IF NOT FOUND THEN
                RETURN false;
            END IF;
            DELETE FROM buckets WHERE limit_id = p_l.id AND key = p_key;
        END IF;
        RETURN true;
    END IF;
    IF cardinality(p_l.thresholds) = 0 THEN
        NULL;
    ELSIF (p_l.th_min_amount IS NULL OR p_afters[cardinality(p_afters)] < p_l.th_min_amount)
          AND (p_l.th_min_pct IS NULL OR p_afters[cardinality(p_afters)] < p_l.capacity * p_l.th_min_pct * 0.01)
          AND (coalesce(p_b.th_above, 0) = 0 OR coalesce(p_b.th_sig, 0) <> p_l.th_sig
               OR coalesce(p_b.th_period, 0) <> coalesce(p_start, 0)) THEN
        -- The common case, one test: the last use is below the lowest amount
        -- and the lowest percentage of the capacity (exact: numeric
        -- multiplication never rounds), so nothing is reached, nor was by
        -- any use before it, and nothing is left unless the marks, current,
        -- hold a threshold.
        v_marks := ARRAY[p_l.th_sig, 0, coalesce(p_start, 0)];
    ELSE
        v_marks := budgetd_batch_marks(p_l, p_b, p_before, p_afters, p_start);
    END IF;
    IF p_expired > 0 THEN
        PERFORM budgetd_expire_holds(p_l, p_key, p_now);
    END IF;
    IF p_b.limit_id IS NOT NULL AND p_l.window_length_us IS NULL AND p_b.slot_idx IS NULL AND p_l.rollover_period IS NULL THEN
        UPDATE buckets
           SET level = p_level, th_sig = coalesce(v_marks[1], th_sig), th_above = coalesce(v_marks[2], th_above),
               th_period = coalesce(v_marks[3], th_period),
               updated_at = CASE WHEN updated_at IS NULL OR updated_at < p_now OR updated_at > p_now + budgetd_clock_step()
                                 THEN p_now ELSE updated_at END
         WHERE limit_id = p_l.id AND key = p_key;
    ELSIF p_b.limit_id IS NOT NULL THEN
        UPDATE buckets
           SET level = p_level, slot_idx = p_idx, slot_sum = p_sum,
               th_sig = coalesce(v_marks[1], th_sig), th_above = coalesce(v_marks[2], th_above),
               th_period = coalesce(v_marks[3], th_period),
               carry_unused = CASE WHEN p_l.rollover_period IS NULL THEN carry_unused ELSE p_l.rollover_unused END,
               carry_period = coalesce(p_l.rollover_period, carry_period),
               updated_at = CASE WHEN updated_at IS NULL OR updated_at < p_now OR updated_at > p_now + budgetd_clock_step()
                                 THEN p_now ELSE updated_at END
         WHERE limit_id = p_l.id AND key = p_key;
    ELSE
        INSERT INTO buckets (limit_id, key, level, updated_at, slot_idx, slot_sum, th_sig, th_above, th_period)
        VALUES (p_l.id, p_key, p_level, p_now, p_idx, p_sum, coalesce(v_marks[1], 0), coalesce(v_marks[2], 0), coalesce(v_marks[3], 0))
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    END IF;
    IF cardinality(p_l.thresholds) > 0 AND v_marks IS NULL THEN
        PERFORM budgetd_cross(p_l, p_key, coalesce(p_b.th_sig, 0), coalesce(p_b.th_above, 0), coalesce(p_b.th_period, 0),
                              p_before, p_afters, p_now, p_start);
    END IF;
    RETURN true;
END $$;
