-- Stores an outcome for an idempotency key in the caller's transaction. When
-- a duplicate committed its record first, raises BD001: the whole call rolls
-- back and the store retries it, which then replays the first answer.
CREATE OR REPLACE FUNCTION budgetd_idem_put(p_scope text, p_key text, p_hash text, p_limit_ids bigint[], p_outcome jsonb, p_now timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RETURN;
    END IF;
    INSERT INTO idempotency AS i (scope, key, hash, limit_ids, outcome, created_at)
    VALUES (p_scope, p_key, p_hash, p_limit_ids, p_outcome, p_now)
    ON CONFLICT (scope, key) DO UPDATE
       SET hash = EXCLUDED.hash, limit_ids = EXCLUDED.limit_ids, outcome = EXCLUDED.outcome, created_at = EXCLUDED.created_at
     WHERE i.created_at <= EXCLUDED.created_at - budgetd_idempotency_ttl() OR NOT budgetd_limits_exist(i.limit_ids);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a request with idempotency key "%" finished first', p_key USING ERRCODE = budgetd_code_idempotency_race();
    END IF;
END $$;
