-- The override of p_l that applies to the bucket p_key at p_now: the exact
-- one, else the one of the longest prefix of p_key, unexpired; a NULL row
-- when none does (budgetd_override_of).
CREATE OR REPLACE FUNCTION budgetd_override(p_l limits, p_key text, p_now timestamptz) RETURNS overrides
LANGUAGE sql STABLE AS $$
    SELECT budgetd_override_of(p_l.id, p_l.override_lens, p_key, p_now)
$$;

-- budgetd_override of the limit p_id whose overrides have the pattern
-- lengths p_lens (limits.override_lens, longest first, -1 for exact ones
-- last): the exact pattern first, then one primary-key probe per distinct
-- prefix length no longer than the key, longest first, stopping at the first
-- unexpired one; so the cost does not grow with the number of overrides, a
-- key with an exact override pays one probe, and a limit without overrides
-- pays none.
-- It is plpgsql, not sql, so that its plans are prepared once per session (a
-- sql function called from plpgsql is not inlined and was planned again at
-- every decision), and it probes one pattern a statement rather than all of
-- them in one `pattern = ANY (…)` with a sort: about 5 µs a call against 15
-- to 45 µs (docs/postgres.md "Overrides").
CREATE OR REPLACE FUNCTION budgetd_override_of(p_id bigint, p_lens int[], p_key text, p_now timestamptz) RETURNS overrides
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_o   overrides;
    v_n   int;
    v_len int := char_length(p_key);
BEGIN
    IF -1 = ANY (p_lens) THEN
        SELECT o.* INTO v_o FROM overrides o WHERE o.limit_id = p_id AND o.pattern = p_key;
        IF FOUND AND (v_o.expires_at IS NULL OR v_o.expires_at > p_now) THEN
            RETURN v_o;
        END IF;
        v_o := NULL;
    END IF;
    FOREACH v_n IN ARRAY coalesce(p_lens, '{}') LOOP
        CONTINUE WHEN v_n < 0 OR v_n > v_len;
        SELECT o.* INTO v_o FROM overrides o WHERE o.limit_id = p_id AND o.pattern = left(p_key, v_n) || '*';
        IF FOUND AND (v_o.expires_at IS NULL OR v_o.expires_at > p_now) THEN
            RETURN v_o;
        END IF;
        v_o := NULL;
    END LOOP;
    RETURN v_o;
END
$$;
