-- p_l as it applies to the bucket p_key at p_now: with the override that
-- resolves for it (budgetd_override, budgetd_with_override), then with the
-- rollover it receives (budgetd_with_rollover, from the bucket's row: read
-- only for a limit with rollover), then with the bucket's grants active at p_now added to its capacity (budgetd_grant_sum,
-- budgetd_with_grants), or as it is. A limit without overrides, and one
-- without grants (limits.grant_rows), costs nothing more. The rollover is
-- computed from the bucket settled at the expiries of overrides it crossed
-- (budgetd_expiry_switch; a write has already written that state).
CREATE OR REPLACE FUNCTION budgetd_terms(p_l limits, p_key text, p_now timestamptz) RETURNS limits
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_b   buckets;
    v_raw limits;  -- p_l as stored, when the rollover may need the bucket settled
    v_s   record;
BEGIN
    IF cardinality(p_l.override_lens) > 0 THEN
        IF p_l.rollover_max IS NOT NULL AND p_l.override_rules THEN
            v_raw := p_l;
        END IF;
        p_l := budgetd_with_override(p_l, budgetd_override(p_l, p_key, p_now), p_now);
    END IF;
    IF p_l.rollover_max IS NOT NULL THEN
        SELECT * INTO v_b FROM buckets WHERE limit_id = p_l.id AND key = p_key;
        IF v_raw.override_expiry > v_b.updated_at THEN
            SELECT * INTO v_s FROM budgetd_expiry_switch(v_raw, p_key, v_b.level, v_b.updated_at, v_b.slot_idx, v_b.slot_sum, p_now);
            v_b.level := v_s.level;
            v_b.updated_at := v_s.updated_at;
        END IF;
        p_l := budgetd_with_rollover(p_l, p_key, v_b.level, v_b.updated_at, v_b.carry_unused, v_b.carry_period, p_now);
    END IF;
    IF p_l.grant_rows > 0 THEN
        p_l := budgetd_with_grants(p_l, budgetd_grant_sum(p_l.id, p_key, p_now));
    END IF;
    RETURN p_l;
END $$;
