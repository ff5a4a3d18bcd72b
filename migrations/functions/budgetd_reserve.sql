-- Reserve: adds a hold p_id of p_amount for p_ttl_us when it fits
-- (bucket.Reserve). BD003 when the bucket has 1000 active holds. A denial
-- leaves the bucket as it was and records a denied entry when the limit
-- records denials. "entry_id" names the entry written (reserved or denied;
-- null when none was). p_terms are the bucket's terms as budgetd resolved
-- them (a budgetd_terms_arg, migration 0021).
CREATE OR REPLACE FUNCTION budgetd_reserve(p_limit text, p_key text, p_amount text, p_ttl_us bigint, p_id text, p_now timestamptz,
                                p_scope text, p_idem text, p_hash text, p_meta text DEFAULT NULL, p_terms text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_amount   numeric := p_amount::numeric;
    v_out      jsonb;
    v_now      timestamptz;
    v_l        limits;
    v_b        buckets;
    v_h        holds;
    v_created  boolean;
    v_held     numeric;
    v_count    bigint;
    v_level    numeric;
    v_accepted boolean;
    v_res      jsonb := NULL;
    v_entry    bigint;
    v_before   numeric;
    v_shadow   boolean;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN v_out;
    END IF;
    v_l := budgetd_limit(p_limit);
    v_created := budgetd_lock_bucket(v_l.id, p_key);
    v_now := coalesce(p_now, budgetd_clock());
    -- The terms budgetd resolved in Go (p_terms, migration 0021), checked
    -- now that the bucket is locked (budgetd_bucket_terms).
    PERFORM budgetd_stale_limits(ARRAY[v_l.id], ARRAY[p_terms], v_now);
    SELECT * INTO v_b FROM buckets WHERE limit_id = v_l.id AND key = p_key;
    v_l := budgetd_bucket_terms(v_l, p_key, p_terms::budgetd_terms_arg, v_b, v_now);
    SELECT coalesce(sum(amount), 0), count(*) INTO v_held, v_count
      FROM holds WHERE limit_id = v_l.id AND key = p_key AND state = 'active' AND expires_at > v_now;
    IF v_count >= budgetd_max_holds() THEN
        RAISE EXCEPTION 'bucket has % active holds', v_count USING ERRCODE = budgetd_code_too_many_holds();
    END IF;
    v_level := budgetd_level_at(v_b.level, v_b.updated_at, v_l.leak_amount, v_l.leak_per_us, v_now, budgetd_period_start(v_l, v_now),
                                v_l.window_length_us, v_l.window_precision_us, v_b.slot_idx, v_b.slot_sum);
    v_accepted := budgetd_fits(v_level, v_held, v_amount, budgetd_ceiling(v_l, (p_terms::budgetd_terms_arg).ceiling_scale));
    IF v_accepted THEN
        -- A shadow limit that records denials flags a hold enforce would deny.
        v_shadow := v_l.record_denials AND v_l.mode = 'shadow' AND NOT budgetd_fits(v_level, v_held, v_amount, v_l.capacity);
        v_before := v_level + v_held;
        v_level := budgetd_settle(v_l, p_key, v_now);
        PERFORM budgetd_write(v_l, p_key, v_level, v_now);
        INSERT INTO holds (id, limit_id, key, amount, state, created_at, expires_at)
        VALUES (p_id, v_l.id, p_key, v_amount, 'active', v_now, v_now + (p_ttl_us::text || ' microseconds')::interval)
        RETURNING * INTO v_h;
        IF cardinality(v_l.thresholds) > 0 THEN
            PERFORM budgetd_notice(v_l, p_key, v_before, v_now);
        END IF;
        v_entry := budgetd_record(v_l, p_key, v_now, 'reserved', v_amount, p_id, p_meta, v_shadow);
        v_res := budgetd_hold_json(v_h, v_l.name);
    ELSE
        v_entry := budgetd_record_denial(v_l, p_key, v_now, v_amount, p_meta);
        IF v_created THEN
            DELETE FROM buckets WHERE limit_id = v_l.id AND key = p_key;
        ELSIF v_b.updated_at > v_now + budgetd_clock_step() THEN
            PERFORM budgetd_unstep(v_l.id, p_key, v_now);
        END IF;
    END IF;
    v_out := jsonb_build_object('accepted', v_accepted, 'reservation', v_res, 'limit', budgetd_limit_json(v_l),
                                'state', budgetd_state_json(v_l.id, p_key), 'now_us', budgetd_us(v_now),
                                'entry_id', v_entry::text);
    PERFORM budgetd_idem_put(p_scope, p_idem, p_hash, ARRAY[v_l.id], v_out, v_now);
    RETURN v_out;
END $$;
