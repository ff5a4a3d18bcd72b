-- Drain: lowers the level, clamped at zero (bucket.Drain). A drain that
-- removes nothing (0, or an empty bucket) is a no-op: it writes neither the
-- bucket, nor a history entry, nor the expiry of a hold (as on every store:
-- only a write records the holds it finds expired). "entry_id" names the
-- drain entry (null when none was written). p_terms are the bucket's terms
-- as budgetd resolved them (a budgetd_terms_arg, migration 0021); a drain
-- of 0 locks nothing and takes its terms as a read does (budgetd_inspect):
-- a bucket to be settled at the end of a temporary rule change answers
-- settle first, so the state answered is the settled one in every case.
CREATE OR REPLACE FUNCTION budgetd_drain(p_limit text, p_key text, p_amount text, p_now timestamptz,
                                         p_scope text, p_idem text, p_hash text, p_meta text DEFAULT NULL, p_terms text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_amount  numeric := p_amount::numeric;
    v_removed numeric := 0;
    v_out     jsonb;
    v_now     timestamptz;
    v_l       limits;
    v_level   numeric;
    v_entry   bigint;
    v_before  numeric;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN v_out;
    END IF;
    v_l := budgetd_limit(p_limit);
    IF v_amount > 0 THEN
        PERFORM budgetd_lock_bucket(v_l.id, p_key);
        v_now := coalesce(p_now, budgetd_clock());
        -- The terms budgetd resolved in Go (p_terms, migration 0021),
        -- checked now that the bucket is locked (budgetd_bucket_terms).
        PERFORM budgetd_stale_limits(ARRAY[v_l.id], ARRAY[p_terms], v_now);
        v_l := budgetd_bucket_terms(v_l, p_key, p_terms::budgetd_terms_arg,
                                    (SELECT b FROM buckets b WHERE b.limit_id = v_l.id AND b.key = p_key), v_now);
        SELECT budgetd_level_at(b.level, b.updated_at, v_l.leak_amount, v_l.leak_per_us, v_now, budgetd_period_start(v_l, v_now),
                                v_l.window_length_us, v_l.window_precision_us, b.slot_idx, b.slot_sum)
          INTO v_level FROM buckets b WHERE b.limit_id = v_l.id AND b.key = p_key;
        v_removed := least(v_amount, coalesce(v_level, 0));
        IF v_removed > 0 THEN
            IF cardinality(v_l.thresholds) > 0 THEN
                v_before := budgetd_used(v_l, p_key, v_now);
            END IF;
            v_level := budgetd_settle(v_l, p_key, v_now);
            PERFORM budgetd_write(v_l, p_key, v_level - v_removed, v_now, 0, v_removed);
            IF cardinality(v_l.thresholds) > 0 THEN
                PERFORM budgetd_notice(v_l, p_key, v_before, v_now);
            END IF;
            v_entry := budgetd_record(v_l, p_key, v_now, 'drain', v_removed, NULL, p_meta);
        END IF;
    ELSE
        v_now := coalesce(p_now, budgetd_clock());
        v_l := budgetd_bucket_terms(v_l, p_key, p_terms::budgetd_terms_arg,
                                    (SELECT b FROM buckets b WHERE b.limit_id = v_l.id AND b.key = p_key), v_now);
    END IF;
    v_out := jsonb_build_object('removed', v_removed::text, 'limit', budgetd_limit_json(v_l),
                                'state', budgetd_state_json(v_l.id, p_key), 'now_us', budgetd_us(v_now),
                                'entry_id', v_entry::text);
    PERFORM budgetd_idem_put(p_scope, p_idem, p_hash, ARRAY[v_l.id], v_out, v_now);
    RETURN v_out;
END $$;
