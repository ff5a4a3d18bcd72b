-- p_l as it applies to the bucket p_key at p_now: with the override that
-- resolves for it (budgetd_override, budgetd_with_override), or as it is.
-- A limit without overrides costs nothing more.
CREATE OR REPLACE FUNCTION budgetd_terms(p_l limits, p_key text, p_now timestamptz) RETURNS limits
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF cardinality(p_l.override_lens) = 0 THEN
        RETURN p_l;
    END IF;
    RETURN budgetd_with_override(p_l, budgetd_override(p_l, p_key, p_now), p_now);
END $$;
