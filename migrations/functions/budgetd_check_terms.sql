-- The terms of the locked bucket p_key of the limit p_l at p_now, from the
-- terms budgetd resolved in Go (p_t, a budgetd_terms_arg, migration 0021),
-- p_updated being the bucket's updated_at (NULL for none): p_l with the
-- override's terms applied (budgetd_terms_limit), once p_t is known to be
-- for p_l's version (its id, updated_at and override_ver; a caller that
-- read p_l before its locks passes the version read after them) and for an
-- instant of p_t's span that contains p_now, else stale_terms
-- (budgetd_stale_terms: budgetd reads the limit again and retries), and the
-- bucket not written before the last switch of its rules by an expiry
-- (p_t.switch_us), else settle: budgetd settles it (ledger.TermsAt, in Go)
-- and retries. DETAIL is {"limit", "key"}. The one place both are raised.
CREATE OR REPLACE FUNCTION budgetd_check_terms(p_l limits, p_key text, p_t budgetd_terms_arg, p_updated timestamptz,
                                               p_now timestamptz) RETURNS limits
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_t.limit_id IS DISTINCT FROM p_l.id OR p_t.revision_us IS DISTINCT FROM budgetd_us(p_l.updated_at)
       OR p_t.override_ver IS DISTINCT FROM coalesce(p_l.override_ver, 0)
       OR p_t.from_us > budgetd_us(p_now) OR p_t.until_us <= budgetd_us(p_now) THEN
        PERFORM budgetd_stale_terms(p_l.name, p_now);
    END IF;
    IF p_updated < budgetd_from_us(p_t.switch_us) THEN
        RAISE EXCEPTION 'limit %: bucket % to be settled at an override''s expiry', p_l.name, p_key
            USING ERRCODE = budgetd_code_settle(), DETAIL = jsonb_build_object('limit', p_l.name, 'key', p_key)::text;
    END IF;
    IF p_t.override IS NULL THEN
        RETURN p_l;
    END IF;
    RETURN budgetd_terms_limit(p_l, p_l.id, p_t, p_now);
END $$;
