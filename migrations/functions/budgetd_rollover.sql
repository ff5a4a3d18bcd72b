-- p_l, a bucket's terms at p_now with its override applied (not its
-- grants), with the rollover it receives added to its capacity: the rule of
-- ledger.CarryAt and ledger.Limit.WithRollover, the same for every store
-- (docs/terms.md "Rollover"). p_level, p_updated, p_cunused and p_cperiod
-- are the bucket's stored level, updated_at and carry (buckets.carry_unused,
-- carry_period). The result holds in rollover_unused and rollover_period
-- the carry to keep at the bucket's write (budgetd_write), and in rollover
-- the rollover received (NULL for none). A limit without rollover, or a
-- bucket never written, is returned as it is. p_prev_cap is the capacity in
-- force at the end of the period before as budgetd resolved it in Go
-- (budgetd_terms_arg.prev_capacity, given for every limit with overrides);
-- NULL is p_l's own.
CREATE OR REPLACE FUNCTION budgetd_with_rollover(p_l limits, p_key text, p_level numeric, p_updated timestamptz,
                                                 p_cunused numeric, p_cperiod bigint, p_now timestamptz,
                                                 p_prev_cap numeric DEFAULT NULL) RETURNS limits
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_start   bigint;
    v_prev    bigint;
    v_written bigint;
    v_cap     numeric;
    v_unused  numeric := 0;
BEGIN
    IF p_l.rollover_max IS NULL OR p_l.period_every IS NULL OR p_updated IS NULL THEN
        RETURN p_l;
    END IF;
    v_start := budgetd_period_start(p_l, p_now);
    v_written := budgetd_us(p_updated);
    IF v_written >= v_start THEN
        -- Written in this period: what was kept for it, if it was.
        IF p_cperiod = v_start THEN
            v_unused := coalesce(p_cunused, 0);
        END IF;
    ELSE
        -- The capacity in force at the end of the period before: the
        -- limit's, with the override that applied at its last microsecond.
        v_cap := coalesce(p_prev_cap, p_l.capacity);
        v_prev := budgetd_period_find(p_l.period_starts, budgetd_from_us(v_start - 1), p_l.name, p_l.id);
        v_unused := v_cap;
        IF v_written >= v_prev THEN
            v_unused := v_cap - p_level;
        END IF;
        v_unused := greatest(trunc(v_unused, 6), 0);
    END IF;
    p_l.rollover_unused := trim_scale(v_unused);
    p_l.rollover_period := v_start;
    IF least(v_unused, p_l.rollover_max) > 0 THEN
        p_l.rollover := trim_scale(least(v_unused, p_l.rollover_max));
        p_l.capacity := p_l.capacity + p_l.rollover;
    END IF;
    RETURN p_l;
END $$;
