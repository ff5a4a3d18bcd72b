-- The override of p_l that applies to the bucket p_key at p_now: the exact
-- one, else the one of the longest prefix of p_key, unexpired; a NULL row
-- when none does (budgetd_override_of).
CREATE OR REPLACE FUNCTION budgetd_override(p_l limits, p_key text, p_now timestamptz) RETURNS overrides
LANGUAGE sql STABLE AS $$
    SELECT budgetd_override_of(p_l.id, p_l.override_lens, p_key, p_now)
$$;

-- budgetd_override of the limit p_id whose overrides have the pattern
-- lengths p_lens (limits.override_lens): one primary-key probe per distinct
-- length no longer than the key, so the cost does not grow with the number
-- of overrides, and a limit without overrides pays none.
-- It is plpgsql, not sql, so that its plan is prepared once per session: a
-- sql function called from plpgsql is not inlined and was planned again at
-- every decision (about 165 µs a call against 50 µs, 100,000 overrides,
-- pgbench calling each side by side; docs/postgres.md "Overrides").
CREATE OR REPLACE FUNCTION budgetd_override_of(p_id bigint, p_lens int[], p_key text, p_now timestamptz) RETURNS overrides
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_o overrides;
BEGIN
    SELECT o.* INTO v_o FROM overrides o
     WHERE o.limit_id = p_id
       AND o.pattern = ANY (ARRAY(SELECT CASE WHEN u.n < 0 THEN p_key ELSE left(p_key, u.n) || '*' END
                                    FROM unnest(p_lens) AS u(n) WHERE u.n <= char_length(p_key)))
       AND (o.expires_at IS NULL OR o.expires_at > p_now)
     ORDER BY o.plen DESC NULLS FIRST
     LIMIT 1;
    RETURN v_o;
END
$$;
