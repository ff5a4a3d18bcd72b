-- A drain that removes nothing (the bucket is empty) is a no-op like a drain
-- of 0: it writes neither the bucket nor a history entry. The rest of
-- budgetd_drain is as in 0001.
CREATE OR REPLACE FUNCTION budgetd_drain(p_limit text, p_key text, p_amount text, p_now timestamptz,
                                         p_scope text, p_idem text, p_hash text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_amount  numeric := p_amount::numeric;
    v_removed numeric := 0;
    v_out     jsonb;
    v_now     timestamptz;
    v_l       limits;
    v_level   numeric;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN v_out;
    END IF;
    v_l := budgetd_limit(p_limit);
    IF v_amount > 0 THEN
        PERFORM budgetd_lock_bucket(v_l.id, p_key);
        v_now := coalesce(p_now, budgetd_clock());
        v_level := budgetd_settle(v_l, p_key, v_now);
        v_removed := least(v_amount, v_level);
        IF v_removed > 0 THEN
            PERFORM budgetd_write(v_l.id, p_key, v_level - v_removed, v_now);
            PERFORM budgetd_record(v_l, p_key, v_now, 'drain', v_removed, NULL);
        END IF;
    ELSE
        v_now := coalesce(p_now, budgetd_clock());
    END IF;
    v_out := jsonb_build_object('removed', v_removed::text, 'limit', budgetd_limit_json(v_l),
                                'state', budgetd_state_json(v_l.id, p_key), 'now_us', budgetd_us(v_now));
    PERFORM budgetd_idem_put(p_scope, p_idem, p_hash, ARRAY[v_l.id], v_out, v_now);
    RETURN v_out;
END $$;

-- A PUT that changes the leak rate first settles every non-empty bucket of the
-- limit at the old rate, in the same transaction, so that every level is kept
-- and the new rate applies from now on only. The rest is as in 0001.
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
               updated_at = CASE WHEN b.updated_at IS NULL OR b.updated_at < v_now THEN v_now ELSE b.updated_at END
         WHERE b.limit_id = v_old.id AND b.level > 0;
    END IF;
    RETURN budgetd_limit_json(v_l);
END $$;
