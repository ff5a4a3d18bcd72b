-- The answers of budgetd_fillup_batch for p_n single-bucket calls of the
-- limit p_limit, which does not exist: each call, as alone, first replays
-- or refuses (BD006) a live idempotency record of its key (scope p_scopes[i],
-- key p_idems[i], hash p_hashes[i]; 24 h, its limits still exist), and is
-- otherwise answered BD002. One row per call, in order: doc (the stored
-- outcome marked replayed) or err_code and err_msg.
CREATE OR REPLACE FUNCTION budgetd_fillup_missing(p_limit text, p_n int, p_now timestamptz,
                                                  p_scopes text[], p_idems text[], p_hashes text[])
RETURNS TABLE (r_doc jsonb, r_err_code text, r_err_msg text)
LANGUAGE plpgsql AS $$
DECLARE
    v_now  timestamptz := coalesce(p_now, budgetd_clock());
    v_hash text;
    v_doc  jsonb;
BEGIN
    FOR k IN 1 .. p_n LOOP
        r_doc := NULL;
        r_err_code := budgetd_code_limit_not_found();
        r_err_msg := format('limit "%s" not found', p_limit);
        IF p_idems[k] IS NOT NULL AND p_idems[k] <> '' THEN
            SELECT i.hash, i.outcome INTO v_hash, v_doc FROM idempotency i
             WHERE i.scope = p_scopes[k] AND i.key = p_idems[k]
               AND i.created_at > v_now - budgetd_idempotency_ttl() AND budgetd_limits_exist(i.limit_ids);
            IF FOUND AND v_hash = p_hashes[k] THEN
                r_doc := v_doc || '{"replayed": true}'::jsonb;
                r_err_code := NULL;
                r_err_msg := NULL;
            ELSIF FOUND THEN
                r_err_code := budgetd_code_key_reused();
                r_err_msg := format('idempotency key "%s" was used with a different request', p_idems[k]);
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END $$;
