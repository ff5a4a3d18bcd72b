-- p_l, a bucket's terms at p_now with its override applied (not its
-- grants), with the rollover it receives added to its capacity: the rule of
-- ledger.CarryAt and ledger.Limit.WithRollover, the same for every store
-- (docs/terms.md "Rollover"). p_level, p_updated, p_cunused and p_cperiod
-- are the bucket's stored level, updated_at and carry (buckets.carry_unused,
-- carry_period). The result holds in rollover_unused and rollover_period
-- the carry to keep at the bucket's write (budgetd_write), and in rollover
-- the rollover received (NULL for none). A limit without rollover, or a
-- bucket never written, is returned as it is. p_prev_cap, when given, is the
-- capacity in force at the end of the period before as budgetd resolved it
-- (budgetd_terms_arg.prev_capacity); without it, an override that applied
-- then is looked up here.
CREATE OR REPLACE FUNCTION budgetd_with_rollover(p_l limits, p_key text, p_level numeric, p_updated timestamptz,
                                                 p_cunused numeric, p_cperiod bigint, p_now timestamptz,
                                                 p_prev_cap numeric DEFAULT NULL) RETURNS limits
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_start   bigint;
    v_prev    bigint;
    v_written bigint;
    v_cap     numeric;
    v_raw     limits;
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
        IF p_prev_cap IS NULL AND cardinality(p_l.override_lens) > 0 THEN
            SELECT * INTO v_raw FROM limits WHERE id = p_l.id;
            v_cap := coalesce((budgetd_override(v_raw, p_key, budgetd_from_us(v_start - 1))).capacity, v_raw.capacity);
        END IF;
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
