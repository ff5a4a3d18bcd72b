-- A multi-bucket Fillup (budgetd_fillup with all_or_none): every item or none
-- (bucket.Fillup per item). Items are distinct buckets; they are locked in
-- (limit_id, key) order. Returns the outcome document, stored for the
-- Idempotency-Key. When the call is denied, each item whose own bucket could
-- not take its cost records a denied entry (budgetd_record_denial); the
-- others record nothing. Each item's "entry_id" names the entry written for
-- it (fillup or denied; null when none was). p_terms are the items' terms
-- as budgetd resolved them (budgetd_bucket_terms). Its statements take the
-- items as arrays, so PostgreSQL's plan cache, left to choose, plans them
-- again on every call (a plan for the arrays at hand looks cheaper than the
-- generic one); the generic plans are the same index lookups and the call
-- costs half as much server time (docs/postgres.md, "Server time per call").
CREATE OR REPLACE FUNCTION budgetd_fillup_all(p_limits text[], p_keys text[], p_costs text[], p_now timestamptz,
                                   p_scope text, p_idem text, p_hash text, p_metas text[] DEFAULT NULL,
                                   p_terms text[] DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_n        int := coalesce(array_length(p_limits, 1), 0);
    v_out      jsonb;
    v_now      timestamptz;
    v_lims     limits[];
    v_ids      bigint[];
    v_costs    numeric[];
    v_created  boolean[];
    v_fits     boolean[];
    v_shadow   boolean[];  -- per item: a shadow-denied charge (record_denials on a shadow limit)
    v_items    jsonb[];
    v_accepted boolean := true;
    v_l        limits;
    v_b        buckets;
    v_held     numeric;
    v_level    numeric;
    v_before   numeric;
    v_r        record;
    v_entry    bigint;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN v_out;
    END IF;
    -- Every limit first, in one statement: an unknown one fails the call
    -- before anything is locked.
    SELECT array_agg(l ORDER BY u.o), array_agg(l.id ORDER BY u.o) INTO v_lims, v_ids
      FROM unnest(p_limits) WITH ORDINALITY AS u(n, o) LEFT JOIN limits l ON l.name = u.n;
    FOR i IN 1 .. v_n LOOP
        IF v_ids[i] IS NULL THEN
            RAISE EXCEPTION 'limit "%" not found', p_limits[i] USING ERRCODE = budgetd_code_limit_not_found();
        END IF;
        v_costs[i] := p_costs[i]::numeric;
        v_created[i] := false;
    END LOOP;
    FOR v_r IN SELECT u.ord FROM unnest(v_ids, p_keys) WITH ORDINALITY AS u(lid, k, ord) ORDER BY u.lid, u.k COLLATE "C" LOOP
        v_created[v_r.ord] := budgetd_lock_bucket(v_ids[v_r.ord], p_keys[v_r.ord]);
    END LOOP;
    v_now := coalesce(p_now, budgetd_clock());
    -- Now that the buckets are locked: the first limit whose row is not the
    -- version the terms budgetd resolved in Go (p_terms, migration 0021)
    -- were resolved from raises stale_terms. Then each bucket and what its
    -- active holds hold, one primary-key lookup each: a join with the items
    -- would keep, under the generic plans above, the plan made for the
    -- table as the session first saw it (empty: a scan of every bucket).
    PERFORM budgetd_stale_limits(v_ids, p_terms, v_now);
    FOR i IN 1 .. v_n LOOP
        SELECT * INTO v_b FROM buckets WHERE limit_id = v_ids[i] AND key = p_keys[i];
        SELECT coalesce(sum(amount), 0) INTO v_held
          FROM holds WHERE limit_id = v_ids[i] AND key = p_keys[i] AND state = 'active' AND expires_at > v_now;
        v_lims[i] := budgetd_bucket_terms(v_lims[i], p_keys[i], p_terms[i]::budgetd_terms_arg, v_b, v_now);
        v_l := v_lims[i];
        v_level := budgetd_level_at(v_b.level, v_b.updated_at, v_l.leak_amount, v_l.leak_per_us, v_now, budgetd_period_start(v_l, v_now),
                                    v_l.window_length_us, v_l.window_precision_us, v_b.slot_idx, v_b.slot_sum);
        v_fits[i] := budgetd_fits(v_level, v_held, v_costs[i], budgetd_ceiling(v_l, (p_terms[i]::budgetd_terms_arg).ceiling_scale));
        -- A shadow limit that records denials flags an item enforce would deny.
        v_shadow[i] := v_l.record_denials AND v_l.mode = 'shadow' AND NOT budgetd_fits(v_level, v_held, v_costs[i], v_l.capacity);
        v_accepted := v_accepted AND v_fits[i];
    END LOOP;
    FOR i IN 1 .. v_n LOOP
        v_l := v_lims[i];
        v_entry := NULL;
        IF v_accepted AND v_costs[i] > 0 THEN
            IF cardinality(v_l.thresholds) > 0 THEN
                v_before := budgetd_used(v_l, p_keys[i], v_now);
            END IF;
            v_level := budgetd_settle(v_l, p_keys[i], v_now);
            PERFORM budgetd_write(v_l, p_keys[i], v_level + v_costs[i], v_now, v_costs[i]);
            IF cardinality(v_l.thresholds) > 0 THEN
                PERFORM budgetd_notice(v_l, p_keys[i], v_before, v_now);
            END IF;
            v_entry := budgetd_record(v_l, p_keys[i], v_now, 'fillup', v_costs[i], NULL, p_metas[i], v_shadow[i]);
        ELSE
            IF NOT v_fits[i] THEN
                v_entry := budgetd_record_denial(v_l, p_keys[i], v_now, v_costs[i], p_metas[i]);
            END IF;
            IF v_created[i] THEN
                DELETE FROM buckets WHERE limit_id = v_l.id AND key = p_keys[i];
            ELSE
                PERFORM budgetd_unstep(v_l.id, p_keys[i], v_now);
            END IF;
        END IF;
        v_items[i] := jsonb_build_object('fits', v_fits[i], 'limit', budgetd_limit_json(v_l),
                                         'state', budgetd_state_json(v_l.id, p_keys[i]), 'entry_id', v_entry::text);
    END LOOP;
    v_out := jsonb_build_object('accepted', v_accepted, 'now_us', budgetd_us(v_now), 'items', to_jsonb(v_items));
    PERFORM budgetd_idem_put(p_scope, p_idem, p_hash, v_ids, v_out, v_now);
    RETURN v_out;
END $$;
