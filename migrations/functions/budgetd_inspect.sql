-- Inspect: the bucket as it is, under the terms budgetd resolved in Go
-- (p_terms, a budgetd_terms_arg, migration 0021; budgetd_bucket_terms),
-- writing nothing. A bucket that crossed the end of a temporary rule change
-- since its last write answers settle: budgetd settles it (the state any
-- call finds first, which changes no answer, as the memory store does) and
-- asks again.
CREATE OR REPLACE FUNCTION budgetd_inspect(p_limit text, p_key text, p_now timestamptz, p_terms text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_raw limits := budgetd_limit(p_limit);
    v_l   limits;
    v_now timestamptz := coalesce(p_now, budgetd_clock());
BEGIN
    v_l := budgetd_bucket_terms(v_raw, p_key, p_terms::budgetd_terms_arg,
                                (SELECT b FROM buckets b WHERE b.limit_id = v_raw.id AND b.key = p_key), v_now);
    RETURN jsonb_build_object('limit', budgetd_limit_json(v_l), 'state', budgetd_state_json(v_raw.id, p_key),
                              'now_us', budgetd_us(v_now));
END $$;
