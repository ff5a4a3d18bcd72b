-- The terms of a bucket before its rollover and grants: the limit's row
-- p_base (read by id p_id when the caller has not read it yet) with the
-- override p_o applied (budgetd_with_override; p_base as it is when p_o is
-- the NULL row). budgetd_fillup_batch makes it only where a decision needs
-- the whole row (rollover, grants, an expired hold, the threshold rule with
-- events, an idempotent answer): an override of capacity alone changes only
-- the capacity and the ceiling it computes inline.
CREATE OR REPLACE FUNCTION budgetd_base_terms(p_base limits, p_id bigint, p_o overrides, p_now timestamptz) RETURNS limits
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_base.id IS NULL THEN
        SELECT * INTO p_base FROM limits WHERE id = p_id;
    END IF;
    IF p_o.limit_id IS NULL THEN
        RETURN p_base;
    END IF;
    RETURN budgetd_with_override(p_base, p_o, p_now);
END $$;
