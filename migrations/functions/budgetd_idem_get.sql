-- Looks up an idempotency record: NULL when there is none (or it is older than
-- 24h, or a limit it touched was deleted), the stored outcome marked replayed
-- when the hash matches, BD006 otherwise.
CREATE OR REPLACE FUNCTION budgetd_idem_get(p_scope text, p_key text, p_hash text, p_now timestamptz) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_r idempotency;
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RETURN NULL;
    END IF;
    SELECT * INTO v_r FROM idempotency WHERE scope = p_scope AND key = p_key;
    IF NOT FOUND OR v_r.created_at <= p_now - budgetd_idempotency_ttl() OR NOT budgetd_limits_exist(v_r.limit_ids) THEN
        RETURN NULL;
    END IF;
    IF v_r.hash <> p_hash THEN
        RAISE EXCEPTION 'idempotency key "%" was used with a different request', p_key USING ERRCODE = budgetd_code_key_reused();
    END IF;
    RETURN v_r.outcome || '{"replayed": true}'::jsonb;
END $$;
