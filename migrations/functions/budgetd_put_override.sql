-- PUT (p_delete false) or DELETE (p_delete true) of the override p_pattern
-- of the limit p_name, in one transaction with the limit's row locked, as a
-- PUT of the limit is. A NULL term comes from the limit; p_starts is the
-- table of period starts (computed by budgetd) for the period p_period_key
-- names, of an override that sets tz or start_day. budgetd has settled the
-- buckets the change touches before, in the same transaction (Go:
-- changeTerms). limits.override_lens, override_rules and override_expiry are
-- kept up to date, and override_ver counts the change. Returns the
-- override's document (budgetd_override_json), NULL when a DELETE found no
-- unexpired override.
CREATE OR REPLACE FUNCTION budgetd_put_override(p_name text, p_pattern text, p_now timestamptz, p_delete boolean,
                                                p_capacity text DEFAULT NULL, p_leak_amount text DEFAULT NULL, p_leak_per_us bigint DEFAULT NULL,
                                                p_tz text DEFAULT NULL, p_start_day int DEFAULT NULL, p_starts bigint[] DEFAULT NULL,
                                                p_period_key text DEFAULT NULL,
                                                p_window_length_us bigint DEFAULT NULL, p_window_precision_us bigint DEFAULT NULL,
                                                p_expires_at timestamptz DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_now    timestamptz := coalesce(p_now, budgetd_clock());
    v_l      limits;
    v_o      overrides;
    v_plen   int := CASE WHEN right(p_pattern, 1) = '*' THEN char_length(p_pattern) - 1 END;
    v_prefix text := CASE WHEN right(p_pattern, 1) = '*' THEN left(p_pattern, -1) END;
    v_lens   int[];
BEGIN
    SELECT * INTO v_l FROM limits WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'limit "%" not found', p_name USING ERRCODE = budgetd_code_limit_not_found();
    END IF;
    IF p_delete THEN
        SELECT * INTO v_o FROM overrides
         WHERE limit_id = v_l.id AND pattern = p_pattern AND (expires_at IS NULL OR expires_at > v_now);
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    IF p_delete THEN
        DELETE FROM overrides WHERE limit_id = v_l.id AND pattern = p_pattern;
    ELSE
        INSERT INTO overrides AS o (limit_id, pattern, plen, capacity, leak_amount, leak_per_us, period_tz, period_start_day,
                                    period_starts, period_key, window_length_us, window_precision_us, expires_at, created_at, updated_at)
        VALUES (v_l.id, p_pattern, v_plen, p_capacity::numeric, p_leak_amount::numeric, p_leak_per_us, p_tz, p_start_day,
                p_starts, p_period_key, p_window_length_us, p_window_precision_us, p_expires_at, v_now, v_now)
        ON CONFLICT (limit_id, pattern) DO UPDATE
           SET capacity = EXCLUDED.capacity, leak_amount = EXCLUDED.leak_amount, leak_per_us = EXCLUDED.leak_per_us,
               period_tz = EXCLUDED.period_tz, period_start_day = EXCLUDED.period_start_day,
               period_starts = EXCLUDED.period_starts, period_key = EXCLUDED.period_key,
               window_length_us = EXCLUDED.window_length_us, window_precision_us = EXCLUDED.window_precision_us,
               expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at,
               -- An override put again after it expired is a new one.
               created_at = CASE WHEN o.expires_at IS NOT NULL AND o.expires_at <= EXCLUDED.updated_at
                                 THEN EXCLUDED.created_at ELSE o.created_at END
        RETURNING * INTO v_o;
    END IF;
    -- The lengths of the patterns left, longest first (-1: exact ones).
    IF p_delete AND EXISTS (SELECT 1 FROM overrides WHERE limit_id = v_l.id AND plen IS NOT DISTINCT FROM v_plen) THEN
        v_lens := v_l.override_lens;
    ELSIF p_delete THEN
        v_lens := array_remove(v_l.override_lens, coalesce(v_plen, -1));
    ELSE
        v_lens := ARRAY(SELECT DISTINCT u.n FROM unnest(v_l.override_lens || coalesce(v_plen, -1)) AS u(n) ORDER BY u.n DESC);
    END IF;
    -- override_ver counts every change: the version of the limit's
    -- overrides that a decision checks the terms resolved in Go against
    -- (budgetd_terms_arg, migration 0021).
    UPDATE limits
       SET override_ver = coalesce(override_ver, 0) + 1,
           override_lens = v_lens,
           override_rules = override_rules OR (NOT p_delete AND (p_leak_per_us IS NOT NULL OR p_tz IS NOT NULL
                                                                 OR p_start_day IS NOT NULL OR p_window_length_us IS NOT NULL)),
           override_expiry = CASE WHEN p_delete THEN override_expiry ELSE greatest(override_expiry, p_expires_at) END
     WHERE id = v_l.id
    RETURNING override_ver, override_lens, override_rules, override_expiry
         INTO v_l.override_ver, v_l.override_lens, v_l.override_rules, v_l.override_expiry;
    RETURN budgetd_override_json(v_o);
END $$;

-- An override as the store answers it: its terms (null: the limit's) and
-- times in µs.
CREATE OR REPLACE FUNCTION budgetd_override_json(o overrides) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN o.limit_id IS NULL THEN NULL ELSE
        jsonb_build_object('pattern', o.pattern, 'capacity', o.capacity::text, 'leak_amount', o.leak_amount::text,
            'leak_per_us', o.leak_per_us, 'tz', o.period_tz, 'start_day', o.period_start_day,
            'window_length_us', o.window_length_us, 'expires_us', budgetd_us(o.expires_at),
            'created_us', budgetd_us(o.created_at), 'updated_us', budgetd_us(o.updated_at)) END
$$;
