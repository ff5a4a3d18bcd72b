-- budgetd_fillup_batch: the single-bucket calls of one bucket in a
-- budgetd_fillup call (p_costs, with each call's Idempotency-Key in p_scopes,
-- p_idems and p_hashes, and its meta), decided in the order given at one
-- instant under one lock of the bucket row, each exactly as it would be
-- decided alone as the next call on the bucket. Per item:
--   * with a key, a live record (24 h, its limits still exist; those of
--     earlier items of the call count) is replayed (same hash: its outcome
--     with "replayed": true) or refused (BD006) without touching the bucket;
--   * otherwise the cost is accepted or denied on its own, with its history
--     entry (a denied one when the limit records denials) and, with a key,
--     its idempotency record: the document a call alone would store. A
--     record that a concurrent call committed first raises BD001: the store
--     retries the whole call, which then replays.
-- A missing limit is answered per item (budgetd_fillup_missing); any other
-- failure fails the whole call, and so every caller in it.
--
-- p_l, when given, is the limit's row as the caller read it (budgetd_fillup
-- reads those of all its buckets at once): only the bucket is read here.
-- p_t is the bucket's terms as budgetd resolved them in Go (migration 0021),
-- checked after the lock (budgetd_check_terms) before anything is written.
--
-- One row per item, in order: fits, the bucket right after the item (level
-- as text, updated µs, active holds and a window's slots as two arrays
-- each), the id of the history entry it wrote (NULL for none), the shared
-- now and the limit's terms; or doc (a replay); or err_code and err_msg.
--
-- Each statement of a plpgsql function costs a plan check, a snapshot and an
-- executor start, and each expression a set-up per transaction: the limit
-- and the locked row are read in one statement, the holds in one, the row
-- written once (budgetd_batch_write; when a concurrent call created it
-- first, the function starts over on that row), the history entries and the
-- idempotency records in one INSERT each.
CREATE OR REPLACE FUNCTION budgetd_fillup_batch(p_limit text, p_key text, p_costs text[], p_now timestamptz,
                                     p_scopes text[], p_idems text[], p_hashes text[], p_metas text[] DEFAULT NULL,
                                     p_l limits DEFAULT NULL, p_t budgetd_terms_arg DEFAULT NULL)
RETURNS TABLE (r_fits boolean, r_level text, r_updated_us bigint, r_hold_amounts text[], r_hold_expires bigint[],
               r_now_us bigint, r_capacity text, r_leak_amount text, r_leak_per_us bigint, r_period jsonb, r_history boolean,
               r_created_us bigint, r_limit_updated_us bigint, r_doc jsonb, r_err_code text, r_err_msg text,
               r_window_length_us bigint, r_window_precision_us bigint, r_slot_idx bigint[], r_slot_sums text[],
               r_record_denials boolean, r_entry_id text, r_mode text, r_grace text, r_thresholds text[], r_override text,
               r_grants text, r_rollover text)
LANGUAGE plpgsql AS $$
DECLARE
    v_n        int := coalesce(array_length(p_costs, 1), 0);
    v_now      timestamptz;
    v_l        limits;    -- the limit under the bucket's terms (override, rollover, grants)
    v_b        buckets;   -- the locked row as stored (the NULL row for none)
    v_r        record;
    v_ceil     numeric;   -- what a cost is admitted against (budgetd_ceiling)
    v_start    bigint;    -- the period's start (NULL: not periodic)
    v_held     numeric;
    v_expired  bigint;
    -- The active holds' amounts and expiries, with and without the expired ones (budgetd_holds_at).
    v_all_a    text[]; v_all_e bigint[]; v_live_a text[]; v_live_e bigint[];
    v_level    numeric;
    v_cost     numeric;
    v_fits     boolean;
    v_wrote    boolean;
    v_lvl_text text;      -- the level and time an answer shows
    v_upd_us   bigint;
    v_widx     bigint[]; v_wsum numeric[];  -- the slots once written
    v_before   numeric;   -- level + held before the first item
    v_afters   numeric[]; -- level + held after each accepted item (thresholds only)
    v_limit    jsonb;
    v_doc      jsonb;
    v_j        int;
    v_trim     boolean;
    v_ids      bigint[];  -- the ids of the history entries written, in order
    -- Per item: its answer; a_live: without the expired holds; a_wlast: the
    -- newest slot's sum after it, once written; a_entry: its history entry
    -- (a position in w_costs); a_rep: the earlier item it replays (in w_docs).
    a_fits     boolean[]; a_level text[]; a_upd bigint[]; a_live boolean[]; a_doc jsonb[]; a_err text[];
    a_wlast    numeric[]; a_entry int[]; a_rep int[];
    -- The history entries and idempotency records to write; w_shadow: a
    -- shadow-denied fillup (true) or NULL.
    w_events   text[]; w_shadow boolean[]; w_costs numeric[]; w_metas text[]; w_item int[]; w_docs jsonb[];
BEGIN
    LOOP
        IF p_l.id IS NOT NULL THEN
            v_l := p_l;
            SELECT * INTO v_b FROM buckets WHERE limit_id = p_l.id AND key = p_key FOR UPDATE;
        ELSE
            SELECT l, b.bb INTO v_r
              FROM limits l
              LEFT JOIN LATERAL (SELECT bb FROM buckets bb WHERE bb.limit_id = l.id AND bb.key = p_key FOR UPDATE) b ON true
             WHERE l.name = p_limit;
            v_l := v_r.l;
            v_b := v_r.bb;
        END IF;
        IF v_l.id IS NULL THEN
            FOR r_doc, r_err_code, r_err_msg IN
                SELECT * FROM budgetd_fillup_missing(p_limit, v_n, p_now, p_scopes, p_idems, p_hashes) LOOP
                RETURN NEXT;
            END LOOP;
            RETURN;
        END IF;
        v_now := coalesce(p_now, budgetd_clock());
        -- Under the lock: the limit's version as it is now, and the holds
        -- (their lists only when there are any: four ordered aggregates cost
        -- more than the common bucket without holds should pay).
        SELECT l.updated_at, l.override_ver, h.held, h.expired, h.n
          INTO v_l.updated_at, v_l.override_ver, v_held, v_expired, v_j
          FROM limits l,
               LATERAL (SELECT coalesce(sum(h.amount) FILTER (WHERE h.expires_at > v_now), 0) AS held,
                               count(*) FILTER (WHERE h.expires_at <= v_now) AS expired, count(*) AS n
                          FROM holds h WHERE h.limit_id = l.id AND h.key = p_key AND h.state = 'active') h
         WHERE l.id = v_l.id;
        v_l := budgetd_check_terms(v_l, p_key, p_t, v_b.updated_at, v_now);
        IF v_l.rollover_max IS NOT NULL AND v_b.updated_at IS NOT NULL THEN
            v_l := budgetd_with_rollover(v_l, p_key, v_b.level, v_b.updated_at, v_b.carry_unused, v_b.carry_period,
                                         v_now, p_t.prev_capacity);
        END IF;
        IF v_l.grant_rows > 0 THEN
            v_l := budgetd_with_grants(v_l, budgetd_grant_sum(v_l.id, p_key, v_now));
        END IF;
        v_ceil := budgetd_ceiling(v_l, p_t.ceiling_scale);
        IF v_b.updated_at > v_now THEN
            PERFORM budgetd_note_step(v_b.updated_at, v_now);
        END IF;
        v_all_a := '{}'; v_all_e := '{}'; v_live_a := '{}'; v_live_e := '{}';
        IF v_j > 0 THEN
            SELECT * INTO v_held, v_expired, v_all_a, v_all_e, v_live_a, v_live_e FROM budgetd_holds_at(v_l.id, p_key, v_now);
        END IF;
        -- The level at v_now, once: the items share the instant.
        IF v_l.period_every IS NOT NULL THEN
            v_start := budgetd_period_find(v_l.period_starts, v_now, p_limit, v_l.id);
        END IF;
        v_level := budgetd_level_at(v_b.level, v_b.updated_at, v_l.leak_amount, v_l.leak_per_us, v_now, v_start,
                                    v_l.window_length_us, v_l.window_precision_us, v_b.slot_idx, v_b.slot_sum);
        v_before := v_level + v_held;
        v_afters := '{}';
        -- What an answer shows until something is written: the row as stored.
        v_lvl_text := coalesce(v_b.level::text, '0');
        v_upd_us := budgetd_us(v_b.updated_at);
        r_now_us := budgetd_us(v_now);
        v_wrote := false; v_widx := NULL; v_wsum := NULL; v_limit := NULL;
        a_fits := '{}'; a_level := '{}'; a_upd := '{}'; a_live := '{}'; a_doc := '{}'; a_err := '{}'; a_wlast := '{}';
        a_entry := '{}'; a_rep := '{}';
        w_events := '{}'; w_shadow := '{}'; w_costs := '{}'; w_metas := '{}'; w_item := '{}'; w_docs := '{}';

        -- Decide, in order.
        FOR k IN 1 .. v_n LOOP
            IF p_idems[k] IS NOT NULL AND p_idems[k] <> '' THEN
                -- An earlier item of this call with the key counts as written.
                v_j := NULL;
                FOR j IN REVERSE cardinality(w_item) .. 1 LOOP
                    IF p_scopes[w_item[j]] = p_scopes[k] AND p_idems[w_item[j]] = p_idems[k] THEN
                        v_j := j;
                        EXIT;
                    END IF;
                END LOOP;
                IF v_j IS NOT NULL THEN
                    -- Same hash: answered once that item's entry id is known.
                    a_rep[k] := CASE WHEN p_hashes[w_item[v_j]] = p_hashes[k] THEN v_j END;
                    a_err[k] := CASE WHEN a_rep[k] IS NULL THEN budgetd_code_key_reused() END;
                    CONTINUE;
                END IF;
                -- budgetd_idem_get, inline.
                SELECT CASE WHEN i.hash = p_hashes[k] THEN i.outcome || '{"replayed": true}'::jsonb END INTO v_doc
                  FROM idempotency i
                 WHERE i.scope = p_scopes[k] AND i.key = p_idems[k]
                   AND i.created_at > v_now - budgetd_idempotency_ttl() AND budgetd_limits_exist(i.limit_ids);
                IF FOUND THEN
                    a_doc[k] := v_doc;
                    a_err[k] := CASE WHEN v_doc IS NULL THEN budgetd_code_key_reused() END;
                    CONTINUE;
                END IF;
            END IF;

            v_cost := p_costs[k]::numeric;
            v_fits := budgetd_fits(v_level, v_held, v_cost, v_ceil);
            IF v_fits AND v_cost > 0 THEN
                v_level := trim_scale(v_level + v_cost);
                IF cardinality(v_l.thresholds) > 0 THEN
                    v_afters := v_afters || (v_level + v_held);
                END IF;
                IF v_l.window_length_us IS NOT NULL AND NOT v_wrote THEN
                    -- The first charge settles the slots; later ones go to the same newest slot.
                    SELECT s.o_idx, s.o_sum INTO v_widx, v_wsum
                      FROM budgetd_window_slots(v_b.level, v_b.updated_at, v_l.window_length_us, v_l.window_precision_us,
                                                v_b.slot_idx, v_b.slot_sum, v_now, v_cost, 0) AS s;
                ELSIF v_l.window_length_us IS NOT NULL THEN
                    v_wsum[cardinality(v_wsum)] := trim_scale(v_wsum[cardinality(v_wsum)] + v_cost);
                END IF;
                v_wrote := true;
                v_lvl_text := v_level::text;
                v_upd_us := budgetd_us(CASE WHEN v_b.updated_at IS NULL OR v_b.updated_at < v_now
                                                 OR v_b.updated_at > v_now + budgetd_clock_step() THEN v_now ELSE v_b.updated_at END);
            END IF;
            IF v_l.history AND ((v_fits AND v_cost > 0) OR (NOT v_fits AND v_l.record_denials)) THEN
                -- A shadow limit that records denials flags what enforce would deny.
                w_events := w_events || CASE WHEN v_fits THEN 'fillup' ELSE 'denied' END;
                w_shadow := w_shadow || (CASE WHEN v_fits AND v_l.record_denials AND v_l.mode = 'shadow'
                                                   AND v_level + v_held > v_l.capacity THEN true END);
                w_costs := w_costs || v_cost;
                w_metas := w_metas || p_metas[k];
                a_entry[k] := cardinality(w_costs);
            END IF;
            a_fits[k] := v_fits;
            a_level[k] := v_lvl_text;
            a_upd[k] := v_upd_us;
            a_wlast[k] := CASE WHEN v_wrote AND v_l.window_length_us IS NOT NULL THEN v_wsum[cardinality(v_wsum)] END;
            a_live[k] := v_wrote AND v_expired > 0;  -- expired holds are recorded by the first write
            IF p_idems[k] IS NOT NULL AND p_idems[k] <> '' THEN
                v_limit := coalesce(v_limit, budgetd_limit_json(v_l));
                w_item := w_item || k;
                w_docs := w_docs || budgetd_idem_doc(v_fits, r_now_us, v_limit, v_lvl_text, v_upd_us,
                    CASE WHEN a_live[k] THEN v_live_a ELSE v_all_a END, CASE WHEN a_live[k] THEN v_live_e ELSE v_all_e END,
                    CASE WHEN v_wrote THEN budgetd_slots_json(v_widx, v_wsum) ELSE budgetd_slots_json(v_b.slot_idx, v_b.slot_sum) END);
            END IF;
        END LOOP;

        -- Write the bucket once; start over when a concurrent call created it first.
        CONTINUE WHEN NOT budgetd_batch_write(v_l, v_b, p_key, v_wrote, v_level, v_widx, v_wsum, v_expired, v_before, v_afters,
                                              v_start, v_now);
        EXIT;
    END LOOP;

    -- The history entries, in order: ids grow with insertion, so the i-th
    -- smallest id is the i-th entry. About one insert in 256 trims the bucket
    -- as budgetd_record does. Each item's document gets its entry's id.
    IF cardinality(w_costs) > 0 THEN
        WITH ins AS (
            INSERT INTO history (limit_id, key, at, event, amount, reservation_id, meta, shadow_denied)
            SELECT v_l.id, p_key, v_now, u.e, u.c, NULL, nullif(u.m, '')::jsonb, u.s
              FROM unnest(w_events, w_costs, w_metas, w_shadow) WITH ORDINALITY AS u(e, c, m, s, o) ORDER BY u.o
            RETURNING id)
        SELECT bool_or(id % 256 = 0), array_agg(id ORDER BY id) INTO v_trim, v_ids FROM ins;
        FOR j IN 1 .. cardinality(w_item) LOOP
            IF a_entry[w_item[j]] IS NOT NULL THEN
                w_docs[j] := jsonb_set(w_docs[j], '{items,0,entry_id}', to_jsonb(v_ids[a_entry[w_item[j]]]::text));
            END IF;
        END LOOP;
        IF v_trim THEN
            DELETE FROM history WHERE id = ANY (ARRAY(
                SELECT id FROM history WHERE limit_id = v_l.id AND key = p_key
                 ORDER BY at DESC, id DESC OFFSET budgetd_history_cap() LIMIT 1000));
        END IF;
    END IF;

    -- The idempotency records (budgetd_idem_put, inline): one that a
    -- concurrent call committed first is not replaced, BD001.
    IF cardinality(w_item) > 0 THEN
        INSERT INTO idempotency AS i (scope, key, hash, limit_ids, outcome, created_at)
        SELECT p_scopes[u.k], p_idems[u.k], p_hashes[u.k], ARRAY[v_l.id], u.d, v_now
          FROM unnest(w_item, w_docs) AS u(k, d)
        ON CONFLICT (scope, key) DO UPDATE
           SET hash = EXCLUDED.hash, limit_ids = EXCLUDED.limit_ids, outcome = EXCLUDED.outcome, created_at = EXCLUDED.created_at
         WHERE i.created_at <= EXCLUDED.created_at - budgetd_idempotency_ttl() OR NOT budgetd_limits_exist(i.limit_ids);
        GET DIAGNOSTICS v_j = ROW_COUNT;
        IF v_j <> cardinality(w_item) THEN
            RAISE EXCEPTION 'a request with an idempotency key of this call finished first' USING ERRCODE = budgetd_code_idempotency_race();
        END IF;
    END IF;

    -- The answers.
    r_capacity := v_l.capacity::text; r_leak_amount := v_l.leak_amount::text; r_leak_per_us := v_l.leak_per_us;
    r_period := budgetd_period_json(v_l); r_history := v_l.history; r_record_denials := v_l.record_denials;
    r_created_us := budgetd_us(v_l.created_at); r_limit_updated_us := budgetd_us(v_l.updated_at);
    r_window_length_us := v_l.window_length_us; r_window_precision_us := v_l.window_precision_us;
    r_mode := v_l.mode; r_grace := v_l.grace::text; r_thresholds := v_l.thresholds; r_override := v_l.override;
    r_grants := v_l.grant_sum::text; r_rollover := v_l.rollover::text;
    FOR k IN 1 .. v_n LOOP
        r_doc := coalesce(a_doc[k], w_docs[a_rep[k]] || '{"replayed": true}'::jsonb);
        r_err_code := a_err[k];
        r_err_msg := CASE WHEN r_err_code IS NOT NULL
                          THEN format('idempotency key "%s" was used with a different request', p_idems[k]) END;
        IF r_doc IS NULL AND r_err_code IS NULL THEN
            r_fits := a_fits[k];
            r_level := a_level[k];
            r_updated_us := a_upd[k];
            r_entry_id := v_ids[a_entry[k]]::text;
            r_hold_amounts := CASE WHEN a_live[k] THEN v_live_a ELSE v_all_a END;
            r_hold_expires := CASE WHEN a_live[k] THEN v_live_e ELSE v_all_e END;
            r_slot_idx := CASE WHEN a_wlast[k] IS NULL THEN v_b.slot_idx ELSE v_widx END;
            r_slot_sums := CASE WHEN a_wlast[k] IS NULL THEN v_b.slot_sum::text[]
                                ELSE (v_wsum[1:cardinality(v_wsum) - 1] || a_wlast[k])::text[] END;
        ELSE
            r_fits := NULL; r_level := NULL; r_updated_us := NULL; r_entry_id := NULL;
            r_hold_amounts := NULL; r_hold_expires := NULL; r_slot_idx := NULL; r_slot_sums := NULL;
        END IF;
        RETURN NEXT;
    END LOOP;
END $$;
