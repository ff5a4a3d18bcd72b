-- Commit (p_commit) or release a hold (bucket.Resolve). Refusals are part of
-- the outcome: reservation_expired, reservation_closed, exceeds_hold.
-- p_terms are the terms of the hold's bucket as budgetd resolved them (a
-- budgetd_terms_arg, migration 0021), checked under the bucket's lock
-- (budgetd_bucket_terms); NULL when budgetd did not know the bucket, which
-- answers stale_terms once the hold is found.
CREATE OR REPLACE FUNCTION budgetd_resolve(p_id text, p_commit boolean, p_amount text, p_overrun boolean, p_now timestamptz,
                                p_scope text, p_idem text, p_hash text, p_meta text DEFAULT NULL, p_terms text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_out     jsonb;
    v_now     timestamptz;
    v_h       holds;
    v_l       limits;
    v_b       buckets;
    v_created boolean;
    v_wrote   boolean := false;
    v_refusal text := '';
    v_charge  numeric;
    v_level   numeric;
    v_before  numeric;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN v_out;
    END IF;
    SELECT * INTO v_h FROM holds WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reservation "%" not found', p_id USING ERRCODE = budgetd_code_reservation_not_found();
    END IF;
    SELECT * INTO v_l FROM limits WHERE id = v_h.limit_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reservation "%" not found', p_id USING ERRCODE = budgetd_code_reservation_not_found();
    END IF;
    v_created := budgetd_lock_bucket(v_l.id, v_h.key);
    -- Read the hold again under its bucket's lock: every change to a hold
    -- happens under that lock.
    SELECT * INTO v_h FROM holds WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reservation "%" not found', p_id USING ERRCODE = budgetd_code_reservation_not_found();
    END IF;
    v_now := coalesce(p_now, budgetd_clock());
    PERFORM budgetd_stale_limits(ARRAY[v_l.id], ARRAY[p_terms], v_now);
    SELECT * INTO v_b FROM buckets WHERE limit_id = v_l.id AND key = v_h.key;
    v_l := budgetd_bucket_terms(v_l, v_h.key, p_terms::budgetd_terms_arg, v_b, v_now);
    IF v_h.state = 'expired' OR (v_h.state = 'active' AND v_now >= v_h.expires_at) THEN
        PERFORM budgetd_expire_holds(v_l, v_h.key, v_now);
        v_refusal := 'reservation_expired';
    ELSIF p_commit THEN
        v_charge := coalesce(p_amount::numeric, v_h.amount);
        IF v_h.state = 'committed' THEN
            IF v_h.committed_amount <> v_charge THEN
                v_refusal := 'reservation_closed';
            END IF;
        ELSIF v_h.state = 'released' THEN
            v_refusal := 'reservation_closed';
        ELSIF v_charge > v_h.amount AND NOT p_overrun THEN
            v_refusal := 'exceeds_hold';
        ELSE
            IF cardinality(v_l.thresholds) > 0 THEN
                v_before := budgetd_used(v_l, v_h.key, v_now);
            END IF;
            v_level := budgetd_settle(v_l, v_h.key, v_now);
            IF v_level + v_charge > budgetd_max_level() THEN
                RAISE EXCEPTION 'level % + % would exceed 10^15', v_level, v_charge USING ERRCODE = budgetd_code_level_overflow();
            END IF;
            PERFORM budgetd_write(v_l, v_h.key, v_level + v_charge, v_now, v_charge);
            UPDATE holds SET state = 'committed', committed_amount = v_charge, resolved_at = v_now WHERE id = p_id;
            IF cardinality(v_l.thresholds) > 0 THEN
                PERFORM budgetd_notice(v_l, v_h.key, v_before, v_now);
            END IF;
            PERFORM budgetd_record(v_l, v_h.key, v_now, 'committed', v_charge, p_id, p_meta);
            v_wrote := true;
        END IF;
    ELSE
        IF v_h.state = 'committed' THEN
            v_refusal := 'reservation_closed';
        ELSIF v_h.state = 'active' THEN
            IF cardinality(v_l.thresholds) > 0 THEN
                v_before := budgetd_used(v_l, v_h.key, v_now);
            END IF;
            v_level := budgetd_settle(v_l, v_h.key, v_now);
            PERFORM budgetd_write(v_l, v_h.key, v_level, v_now);
            UPDATE holds SET state = 'released', resolved_at = v_now WHERE id = p_id;
            IF cardinality(v_l.thresholds) > 0 THEN
                PERFORM budgetd_notice(v_l, v_h.key, v_before, v_now);
            END IF;
            PERFORM budgetd_record(v_l, v_h.key, v_now, 'released', v_h.amount, p_id, p_meta);
            v_wrote := true;
        END IF;
    END IF;
    IF v_created AND NOT v_wrote THEN
        DELETE FROM buckets WHERE limit_id = v_l.id AND key = v_h.key;
    END IF;
    SELECT * INTO v_h FROM holds WHERE id = p_id;
    v_out := jsonb_build_object('reservation', budgetd_hold_json(v_h, v_l.name), 'refusal', v_refusal,
                                'limit', budgetd_limit_json(v_l), 'state', budgetd_state_json(v_l.id, v_h.key),
                                'now_us', budgetd_us(v_now));
    PERFORM budgetd_idem_put(p_scope, p_idem, p_hash, ARRAY[v_l.id], v_out, v_now);
    RETURN v_out;
END $$;
