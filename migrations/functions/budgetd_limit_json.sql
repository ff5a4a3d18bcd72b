-- A limit as the store answers it. "period" is present for a periodic limit
-- only and "window" ({"length_us", "precision_us"}) for a window limit only
-- (both have null leak fields), "record_denials" only when true, and "mode"
-- and "grace" (a percentage, numeric text) only for a limit whose mode is not
-- 'enforce', so a leaky limit's document is what it was before periods
-- existed (a document without "mode" is an enforce limit's), and
-- "thresholds" (their strings) only for a limit that has some, and
-- "override" only for a limit with an override applied, and "grants" (their
-- sum, numeric text) only for one with a bucket's active grants added
-- (budgetd_bucket_terms), and "rollover_max" only for a limit with rollover and
-- "rollover" (the rollover received, numeric text) only for one with a
-- bucket's rollover added (budgetd_with_rollover).
CREATE OR REPLACE FUNCTION budgetd_limit_json(l limits) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('name', l.name, 'capacity', l.capacity::text, 'leak_amount', l.leak_amount::text,
        'leak_per_us', l.leak_per_us, 'history', l.history,
        'created_us', budgetd_us(l.created_at), 'updated_us', budgetd_us(l.updated_at))
        || CASE WHEN l.period_every IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('period', budgetd_period_json(l)) END
        || CASE WHEN l.window_length_us IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('window', jsonb_build_object('length_us', l.window_length_us, 'precision_us', l.window_precision_us)) END
        || CASE WHEN l.record_denials THEN '{"record_denials": true}'::jsonb ELSE '{}'::jsonb END
        || CASE WHEN l.mode = 'enforce' THEN '{}'::jsonb ELSE jsonb_build_object('mode', l.mode, 'grace', l.grace::text) END
        || CASE WHEN cardinality(l.thresholds) = 0 THEN '{}'::jsonb ELSE jsonb_build_object('thresholds', to_jsonb(l.thresholds)) END
        || CASE WHEN l.override IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('override', l.override) END
        || CASE WHEN l.grant_sum IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('grants', l.grant_sum::text) END
        || CASE WHEN l.rollover_max IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('rollover_max', l.rollover_max::text) END
        || CASE WHEN l.rollover IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('rollover', l.rollover::text) END
$$;
