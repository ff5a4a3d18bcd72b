-- Inspect: the bucket as it is, writing nothing (settled at the expiries
-- of overrides it crossed: budgetd_expiry_state_json).
CREATE OR REPLACE FUNCTION budgetd_inspect(p_limit text, p_key text, p_now timestamptz) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_raw limits := budgetd_limit(p_limit);
    v_l   limits;
    v_now timestamptz := coalesce(p_now, budgetd_clock());
BEGIN
    v_l := budgetd_terms(v_raw, p_key, v_now);
    RETURN jsonb_build_object('limit', budgetd_limit_json(v_l), 'state', budgetd_expiry_state_json(v_raw, p_key, v_now),
                              'now_us', budgetd_us(v_now));
END $$;
