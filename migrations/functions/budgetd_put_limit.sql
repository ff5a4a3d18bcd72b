-- PUT of a limit: a leak (p_leak_amount, p_per_us), a calendar period
-- (p_every, p_tz, p_start_day, with p_starts its table of period starts in µs,
-- computed by budgetd) or a rolling window (p_window_length_us,
-- p_window_precision_us). One that changes the rule (the leak rate, the kind,
-- the period or the window) first settles every bucket of the limit with a
-- positive stored level under the old rule, in the same transaction, so that
-- every level is kept and the new rule applies from now on only
-- (bucket.Switch): a level settled at now lies in the current period of a
-- new periodic rule, and a window's slots are dropped, the level reading as
-- one charge made at now under a new window. p_record_denials sets whether
-- denials are recorded (budgetd_record_denial), and p_mode and p_grace the
-- limit's mode (NULL: 'enforce') and its grace, the ceiling it admits costs
-- against (budgetd_ceiling); neither changes a bucket: a level above the new
-- ceiling stays, and nothing more fits until it falls. p_thresholds sets the
-- limit's thresholds ("80%", "4500"; NULL: none) and p_th_sig their
-- ledger.ThresholdSig (and th_min_amount, th_min_pct their lowest amount
-- and percentage, migration 0020); a bucket's marks are recomputed at its next write
-- (budgetd_cross), except that a limit left without thresholds clears them.
-- p_rollover_max is a periodic limit's rollover max (NULL: no rollover);
-- a bucket's carry is kept (budgetd_with_rollover reads it only for the
-- period it was stored for).
CREATE OR REPLACE FUNCTION budgetd_put_limit(p_name text, p_capacity text, p_leak_amount text, p_per_us bigint, p_history boolean, p_now timestamptz,
                                             p_every text DEFAULT NULL, p_tz text DEFAULT NULL, p_start_day int DEFAULT NULL,
                                             p_starts bigint[] DEFAULT NULL,
                                             p_window_length_us bigint DEFAULT NULL, p_window_precision_us bigint DEFAULT NULL,
                                             p_record_denials boolean DEFAULT false,
                                             p_mode text DEFAULT NULL, p_grace text DEFAULT NULL,
                                             p_thresholds text[] DEFAULT NULL, p_th_sig integer DEFAULT 0,
                                             p_rollover_max text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_now   timestamptz := coalesce(p_now, budgetd_clock());
    v_old   limits;
    v_l     limits;
    v_start bigint;
BEGIN
    SELECT * INTO v_old FROM limits WHERE name = p_name FOR UPDATE;
    IF v_old.id IS NOT NULL THEN
        -- Raises period_table when the old rule's table does not reach now.
        v_start := budgetd_period_start(v_old, v_now);
    END IF;
    INSERT INTO limits AS l (name, capacity, leak_amount, leak_per_us, history, created_at, updated_at,
                             period_every, period_tz, period_start_day, period_starts, window_length_us, window_precision_us,
                             record_denials, mode, grace, thresholds, th_sig, th_min_amount, th_min_pct, rollover_max)
    VALUES (p_name, p_capacity::numeric, p_leak_amount::numeric, p_per_us, p_history, v_now, v_now,
            p_every, p_tz, p_start_day, p_starts, p_window_length_us, p_window_precision_us, p_record_denials,
            coalesce(p_mode, 'enforce'), trim_scale(coalesce(p_grace, '0')::numeric),
            coalesce(p_thresholds, '{}'), coalesce(p_th_sig, 0),
            (SELECT min(t::numeric) FROM unnest(p_thresholds) AS t WHERE right(t, 1) <> '%'),
            (SELECT min(left(t, -1)::numeric) FROM unnest(p_thresholds) AS t WHERE right(t, 1) = '%'),
            trim_scale(p_rollover_max::numeric))
    ON CONFLICT (name) DO UPDATE
       SET capacity = EXCLUDED.capacity, leak_amount = EXCLUDED.leak_amount, leak_per_us = EXCLUDED.leak_per_us,
           history = EXCLUDED.history, updated_at = EXCLUDED.updated_at,
           period_every = EXCLUDED.period_every, period_tz = EXCLUDED.period_tz,
           period_start_day = EXCLUDED.period_start_day, period_starts = EXCLUDED.period_starts,
           window_length_us = EXCLUDED.window_length_us, window_precision_us = EXCLUDED.window_precision_us,
           record_denials = EXCLUDED.record_denials, mode = EXCLUDED.mode, grace = EXCLUDED.grace,
           thresholds = EXCLUDED.thresholds, th_sig = EXCLUDED.th_sig,
           th_min_amount = EXCLUDED.th_min_amount, th_min_pct = EXCLUDED.th_min_pct, rollover_max = EXCLUDED.rollover_max,
           -- The terms' version counts the PUT too: budgetd resolves the
           -- mode's ceiling and an override's deltas from the row it read,
           -- and a PUT in the microsecond of the one before (a pinned or
           -- coarse clock) leaves updated_at as it was.
           override_ver = coalesce(l.override_ver, 0) + 1
    RETURNING * INTO v_l;
    -- The buckets under the rule before, settled at now when the rule
    -- changes; those of a limit with overrides budgetd settled before, in
    -- the same transaction, each under its own terms (Go: changeTerms).
    IF v_old.id IS NOT NULL AND cardinality(v_old.override_lens) = 0
       AND (v_old.leak_amount IS DISTINCT FROM v_l.leak_amount OR v_old.leak_per_us IS DISTINCT FROM v_l.leak_per_us
                                 OR v_old.period_every IS DISTINCT FROM v_l.period_every OR v_old.period_tz IS DISTINCT FROM v_l.period_tz
                                 OR v_old.period_start_day IS DISTINCT FROM v_l.period_start_day
                                 OR v_old.window_length_us IS DISTINCT FROM v_l.window_length_us
                                 OR v_old.window_precision_us IS DISTINCT FROM v_l.window_precision_us) THEN
        UPDATE buckets AS b
           SET level = trim_scale(budgetd_level_at(b.level, b.updated_at, v_old.leak_amount, v_old.leak_per_us, v_now, v_start,
                                                   v_old.window_length_us, v_old.window_precision_us, b.slot_idx, b.slot_sum)),
               slot_idx = NULL, slot_sum = NULL,
               updated_at = CASE WHEN b.updated_at IS NULL OR b.updated_at < v_now OR b.updated_at > v_now + budgetd_clock_step()
                                THEN v_now ELSE b.updated_at END
         WHERE b.limit_id = v_old.id AND b.level > 0;
    END IF;
    IF v_old.id IS NOT NULL AND v_old.th_sig <> 0 AND v_l.th_sig = 0 THEN
        UPDATE buckets SET th_sig = 0, th_above = 0, th_period = 0 WHERE limit_id = v_l.id AND th_sig <> 0;
    END IF;
    RETURN budgetd_limit_json(v_l);
END $$;
