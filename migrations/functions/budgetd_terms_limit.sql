-- The limit's row p_base (read by id p_id when the caller has not read it
-- yet) under the terms Go resolved for one bucket (p_t, a budgetd_terms_arg,
-- migration 0021): the override's deltas in place of the limit's own, and
-- the override named in its override column; p_base as it is when no
-- override applies. An override that changes the period brings its own
-- table of period starts (overrides.period_starts); one made for another
-- period than the limit's now raises period_table, as a table that does
-- not reach p_now does: budgetd computes new tables and retries.
CREATE OR REPLACE FUNCTION budgetd_terms_limit(p_base limits, p_id bigint, p_t budgetd_terms_arg, p_now timestamptz) RETURNS limits
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_key text;
BEGIN
    IF p_base.id IS NULL THEN
        SELECT * INTO p_base FROM limits WHERE id = p_id;
    END IF;
    IF p_t.override IS NULL THEN
        RETURN p_base;
    END IF;
    p_base.override := p_t.override;
    p_base.capacity := p_t.capacity;
    p_base.leak_amount := coalesce(p_t.leak_amount, p_base.leak_amount);
    p_base.leak_per_us := coalesce(p_t.leak_per_us, p_base.leak_per_us);
    p_base.window_length_us := coalesce(p_t.window_length_us, p_base.window_length_us);
    p_base.window_precision_us := coalesce(p_t.window_precision_us, p_base.window_precision_us);
    IF p_t.period_tz IS NOT NULL THEN
        SELECT o.period_starts, o.period_key INTO p_base.period_starts, v_key
          FROM overrides o WHERE o.limit_id = p_base.id AND o.pattern = p_t.override;
        IF v_key IS DISTINCT FROM budgetd_period_key(p_base.period_every, p_t.period_tz, p_t.period_start_day) THEN
            RAISE EXCEPTION 'limit %: an override''s table of period starts is for another period', p_base.name
                USING ERRCODE = budgetd_code_period_table(), DETAIL = p_base.id || ' ' || budgetd_us(p_now);
        END IF;
        p_base.period_tz := p_t.period_tz;
        p_base.period_start_day := p_t.period_start_day;
    END IF;
    RETURN p_base;
END $$;

-- Raises stale_terms for the limit p_limit at p_now: the terms passed were
-- resolved from another version of it, or for another instant (migration
-- 0021). DETAIL is {"limit", "now_us"}: budgetd reads the limit again and
-- resolves at that instant.
CREATE OR REPLACE FUNCTION budgetd_stale_terms(p_limit text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'limit %: the terms passed are stale', p_limit
        USING ERRCODE = budgetd_code_stale_terms(), DETAIL = jsonb_build_object('limit', p_limit, 'now_us', budgetd_us(p_now))::text;
END $$;

-- The terms of the locked bucket p_key (p_b: its row, the NULL row for none)
-- of the limit p_l (its row as stored) at p_now, from the terms budgetd
-- resolved in Go (p_t): checked and with the override's terms applied by
-- budgetd_check_terms (stale_terms, settle),
-- the rollover received added (budgetd_with_rollover, with the capacity of
-- the period before as resolved) and the active grants added
-- (budgetd_grant_sum): what is read under the lock. p_t must be for the
-- version of p_l; a caller that read p_l before its locks checks the
-- version again after them (budgetd_stale_limits).
CREATE OR REPLACE FUNCTION budgetd_bucket_terms(p_l limits, p_key text, p_t budgetd_terms_arg, p_b buckets, p_now timestamptz)
RETURNS limits LANGUAGE plpgsql STABLE AS $$
BEGIN
    p_l := budgetd_check_terms(p_l, p_key, p_t, p_b.updated_at, p_now);
    IF p_l.rollover_max IS NOT NULL THEN
        p_l := budgetd_with_rollover(p_l, p_key, p_b.level, p_b.updated_at, p_b.carry_unused, p_b.carry_period, p_now, p_t.prev_capacity);
    END IF;
    IF p_l.grant_rows > 0 THEN
        p_l := budgetd_with_grants(p_l, budgetd_grant_sum(p_l.id, p_key, p_now));
    END IF;
    RETURN p_l;
END $$;

-- Raises stale_terms for the first of the limits p_ids (read before the
-- caller's locks) whose row, read now, is not the version the terms p_terms
-- (budgetd_terms_arg as text, one per limit) were resolved from.
CREATE OR REPLACE FUNCTION budgetd_stale_limits(p_ids bigint[], p_terms text[], p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
BEGIN
    SELECT l.name INTO v_name
      FROM unnest(p_ids, p_terms) AS u(id, t) JOIN limits l ON l.id = u.id
     WHERE budgetd_us(l.updated_at) IS DISTINCT FROM (u.t::budgetd_terms_arg).revision_us
        OR coalesce(l.override_ver, 0) IS DISTINCT FROM (u.t::budgetd_terms_arg).override_ver
     LIMIT 1;
    IF FOUND THEN
        PERFORM budgetd_stale_terms(v_name, p_now);
    END IF;
END $$;
