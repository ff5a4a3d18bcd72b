-- The slots of a window bucket as a state document carries them:
-- {"slot_idx": [numbers], "slot_sums": [sums as text]}, oldest first; {} for
-- a bucket without slots, so that other buckets' documents are unchanged.
-- STABLE, as to_jsonb is, so that PostgreSQL inlines it (budgetd_from_us).
CREATE OR REPLACE FUNCTION budgetd_slots_json(p_idx bigint[], p_sum numeric[]) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_idx IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('slot_idx', to_jsonb(p_idx), 'slot_sums', to_jsonb(p_sum::text[])) END
$$;
