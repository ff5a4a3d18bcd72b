-- PUT of a limit. One that changes the leak rate first settles every bucket
-- of the limit with a positive stored level at the old rate, in the same
-- transaction, so that every level is kept and the new rate applies from now
-- on only.
CREATE OR REPLACE FUNCTION budgetd_put_limit(p_name text, p_capacity text, p_leak_amount text, p_per_us bigint, p_history boolean, p_now timestamptz)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, budgetd_clock());
    v_old limits;
    v_l   limits;
BEGIN
    SELECT * INTO v_old FROM limits WHERE name = p_name FOR UPDATE;
    INSERT INTO limits AS l (name, capacity, leak_amount, leak_per_us, history, created_at, updated_at)
    VALUES (p_name, p_capacity::numeric, p_leak_amount::numeric, p_per_us, p_history, v_now, v_now)
    ON CONFLICT (name) DO UPDATE
       SET capacity = EXCLUDED.capacity, leak_amount = EXCLUDED.leak_amount, leak_per_us = EXCLUDED.leak_per_us,
           history = EXCLUDED.history, updated_at = EXCLUDED.updated_at
    RETURNING * INTO v_l;
    IF v_old.id IS NOT NULL AND (v_old.leak_amount <> v_l.leak_amount OR v_old.leak_per_us <> v_l.leak_per_us) THEN
        UPDATE buckets AS b
           SET level = trim_scale(budgetd_level_at(b.level, b.updated_at, v_old.leak_amount, v_old.leak_per_us, v_now)),
               updated_at = CASE WHEN b.updated_at IS NULL OR b.updated_at < v_now OR b.updated_at > v_now + budgetd_clock_step()
                                THEN v_now ELSE b.updated_at END
         WHERE b.limit_id = v_old.id AND b.level > 0;
    END IF;
    RETURN budgetd_limit_json(v_l);
END $$;
