-- Inspect: the bucket as it is, writing nothing.
CREATE OR REPLACE FUNCTION budgetd_inspect(p_limit text, p_key text, p_now timestamptz) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_l   limits := budgetd_limit(p_limit);
    v_now timestamptz := coalesce(p_now, budgetd_clock());
BEGIN
    v_l := budgetd_terms(v_l, p_key, v_now);
    RETURN jsonb_build_object('limit', budgetd_limit_json(v_l), 'state', budgetd_state_json(v_l.id, p_key),
                              'now_us', budgetd_us(v_now));
END $$;
