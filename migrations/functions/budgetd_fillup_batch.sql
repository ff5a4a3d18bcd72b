-- budgetd_fillup_batch(limit, key, costs[], now, scopes[], idems[], hashes[]):
-- the single-bucket calls of one bucket in a budgetd_fillup call (see there),
-- decided one after another, in the order given, at one instant, under one
-- lock of the bucket row: each exactly as it would be decided alone as the
-- next call on the bucket. Per item:
--   * with an Idempotency-Key, a live record (24 h, its limits still exist) is
--     replayed (same hash: its outcome with "replayed": true) or refused
--     (another hash: err_code BD006) without touching the bucket. Records
--     written by earlier items of the same call are visible, so a duplicate
--     inside a batch replays the first one's answer, as it would alone;
--   * otherwise the cost is accepted or denied on its own, an accepted one
--     gets its own history entry (a denied one too, a denied entry, when the
--     limit records denials: nothing else of the bucket changes), and an
--     item with a key gets its own idempotency record holding the document a
--     call alone would store, with the id of the item's entry. A
--     record that a concurrent transaction committed first raises BD001: the
--     whole call rolls back and the store retries it, which then replays.
-- A missing limit is answered per item (BD002, after the item's idempotency
-- check); no other error is per item: any other failure fails the whole
-- call, and so every caller in it.
--
-- p_l, when given, is the limit's row as the caller read it (budgetd_fillup
-- reads the limits of all its buckets in one statement): the function then
-- reads only the bucket. Without it, or when it is NULL (no such limit), the
-- function reads the limit by name itself.
--
-- p_t is the bucket's terms as budgetd resolved them in Go (migration 0021,
-- docs/postgres.md "Terms resolved in Go"): the override that applies, as
-- deltas of the limit's terms. They are checked against the limit's row
-- after the bucket's lock and against now: stale ones raise stale_terms
-- (budgetd reads the limit again and retries), and a bucket last written
-- before p_t.switch_us raises settle (budgetd settles it and retries).
-- Nothing is written before these checks.
--
-- The work is done in as few statements as the rule allows, since each
-- statement of a plpgsql function costs a plan check, a snapshot and an
-- executor start beyond its own work: the limit and the locked bucket row in
-- one statement (a lateral sub-select FOR UPDATE; the bucket alone with p_l), the holds in one scan
-- after the lock, the decisions in variables, then the row written once (a
-- bucket never written is inserted with its final level, with no placeholder
-- row unless nothing was charged), the history entries of the call in one
-- INSERT and its idempotency records in one INSERT; a limit with thresholds
-- adds nothing while no event is due (the marks go with the row's write),
-- and budgetd_cross's statements when one is. A bucket without slots
-- or rollover carry, before or after, is written without those columns. When the insert of a new
-- bucket finds that a concurrent call created it first, the function starts
-- over on that row (at SERIALIZABLE PostgreSQL reports a serialization
-- failure instead, which the store retries); nothing is written before that
-- insert except recording expired holds.
--
-- A window bucket's slots (budgetd_window_slots) are settled and charged by
-- the first accepted item; every later one is charged to the same newest
-- slot, as it would be alone (the items share the instant, and the bucket's
-- time is then the later of now and its stored time).
--
-- One row per item, in order: fits, the bucket right after the item (level
-- as text, updated µs, active holds as two arrays, a window bucket's slots
-- as two arrays), the id of the history entry the item wrote (fillup or
-- denied; NULL for none) and the shared now and limit (its mode, grace and thresholds
-- included); or doc (an idempotent replay, the stored jsonb); or err_code
-- and err_msg.
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
    v_l        limits;
    v_base     limits;   -- the limit's row, once read
    v_lid      bigint;
    v_cap      numeric;
    v_ceil     numeric;  -- the mode's ceiling (budgetd_ceiling), what a cost is admitted against
    v_mode     text;
    v_grace    numeric;
    v_lamt     numeric;
    v_per      bigint;
    v_every    text;  -- the period of a periodic limit (NULL: leaky)
    v_period   jsonb;
    v_start    bigint;
    v_starts   bigint[];
    v_hist     boolean;
    v_rec      boolean;  -- the limit records denials
    v_lcre     timestamptz;
    v_lupd     timestamptz;
    v_wlen     bigint;  -- the window of a window limit (NULL: another kind)
    v_wprec    bigint;
    v_ovr      text;     -- the pattern of the override that applies, NULL for none
    v_fresh    boolean;  -- p_t was resolved from the limit as stored
    v_grows    int;      -- the limit's rows of grants (limits.grant_rows)
    v_gsum     numeric;  -- the bucket's active grants, NULL for none
    v_rmax     numeric;  -- the limit's rollover max (limits.rollover_max), NULL for none
    v_bcu      numeric;  -- the bucket's carry (buckets.carry_unused, carry_period)
    v_bcp      bigint;
    v_roll     numeric;  -- the rollover the bucket receives, NULL for none
    v_blevel   numeric;
    v_bupd     timestamptz;
    v_bidx     bigint[];  -- the slots as stored
    v_bsum     numeric[];
    v_widx     bigint[];  -- the slots once written
    v_wsum     numeric[];
    v_bfound   boolean;
    v_held     numeric;
    v_ths      text[];   -- the limit's thresholds
    v_tsig     integer;  -- their limits.th_sig
    v_tamt     numeric;  -- the lowest amount and percentage among them (limits.th_min_amount, th_min_pct)
    v_tpct     numeric;
    v_msig     integer;  -- the bucket's marks (budgetd_cross)
    v_mabove   integer;
    v_mperiod  bigint;
    v_before   numeric;  -- level + held before the first item
    v_afters   numeric[];  -- level + held after each accepted item (thresholds only)
    v_tlevel   numeric;  -- a threshold's level
    v_tabove   integer;  -- the marks the threshold rule starts from (see below)
    v_tfirst   integer;  -- the thresholds reached after the first and after the last accepted item
    v_tlast    integer;
    v_wsig     integer;  -- the marks the bucket's write sets (NULL: as stored; budgetd_cross then runs)
    v_wabove   integer;
    v_wperiod  bigint;
    v_expired  bigint;
    v_all_a    text[];
    v_all_e    bigint[];
    v_live_a   text[];
    v_live_e   bigint[];
    v_level    numeric;
    v_cost     numeric;
    v_fits     boolean;
    v_wrote    boolean;
    v_lvl_text text;
    v_upd_us   bigint;
    v_limit    jsonb;
    v_hash     text;
    v_doc      jsonb;
    v_j        int;
    v_trim     boolean;
    v_ids      bigint[];  -- the ids of the history entries written, in order
    -- Per item.
    a_fits     boolean[];
    a_level    text[];
    a_upd      bigint[];
    a_live     boolean[];
    a_doc      jsonb[];
    a_err      text[];
    a_msg      text[];
    a_wlast    numeric[];  -- the newest slot's sum after the item, once written
    a_entry    int[];      -- the item's history entry: its position in w_costs
    a_rep      int[];      -- an item replaying an earlier item of the call: its position in w_docs
    -- History entries (accepted costs, recorded denials) and idempotency
    -- records to write.
    w_events   text[];
    w_shadow   boolean[];  -- per entry: a shadow-denied fillup (true) or NULL
    w_costs    numeric[];
    w_metas    text[];
    w_item     int[];
    w_docs     jsonb[];
BEGIN
    LOOP
        IF p_l.id IS NOT NULL THEN
            -- The limit as the caller read it (budgetd_fillup, once for all
            -- the buckets of its call): only the bucket is read here.
            v_base := p_l;
            v_lid := p_l.id; v_cap := p_l.capacity; v_lamt := p_l.leak_amount; v_per := p_l.leak_per_us;
            v_hist := p_l.history; v_rec := p_l.record_denials; v_lcre := p_l.created_at; v_lupd := p_l.updated_at;
            v_every := p_l.period_every; v_starts := p_l.period_starts; v_period := budgetd_period_json(p_l);
            v_wlen := p_l.window_length_us; v_wprec := p_l.window_precision_us; v_mode := p_l.mode; v_grace := p_l.grace;
            v_ceil := budgetd_ceiling(p_l); v_ths := p_l.thresholds; v_tsig := p_l.th_sig; v_tamt := p_l.th_min_amount; v_tpct := p_l.th_min_pct;
            v_grows := p_l.grant_rows; v_rmax := p_l.rollover_max;
            -- (No row: every target is NULL.)
            SELECT bb.level, bb.updated_at, bb.slot_idx, bb.slot_sum, true, bb.th_sig, bb.th_above, bb.th_period,
                   bb.carry_unused, bb.carry_period
              INTO v_blevel, v_bupd, v_bidx, v_bsum, v_bfound, v_msig, v_mabove, v_mperiod, v_bcu, v_bcp
              FROM buckets bb WHERE bb.limit_id = v_lid AND bb.key = p_key FOR UPDATE;
        ELSE
            v_base := NULL;
            SELECT l.id, l.capacity, l.leak_amount, l.leak_per_us, l.history, l.record_denials, l.created_at, l.updated_at,
                   l.period_every, l.period_starts, budgetd_period_json(l), l.window_length_us, l.window_precision_us,
                   l.mode, l.grace, budgetd_ceiling(l), l.thresholds, l.th_sig, l.th_min_amount, l.th_min_pct, l.grant_rows, l.rollover_max,
                   b.level, b.updated_at, b.slot_idx, b.slot_sum, b.found, b.th_sig, b.th_above, b.th_period, b.carry_unused, b.carry_period
              INTO v_lid, v_cap, v_lamt, v_per, v_hist, v_rec, v_lcre, v_lupd, v_every, v_starts, v_period, v_wlen, v_wprec,
                   v_mode, v_grace, v_ceil, v_ths, v_tsig, v_tamt, v_tpct, v_grows, v_rmax,
                   v_blevel, v_bupd, v_bidx, v_bsum, v_bfound, v_msig, v_mabove, v_mperiod, v_bcu, v_bcp
              FROM limits l
              LEFT JOIN LATERAL (SELECT bb.level, bb.updated_at, bb.slot_idx, bb.slot_sum, true AS found, bb.th_sig, bb.th_above, bb.th_period,
                                        bb.carry_unused, bb.carry_period FROM buckets bb
                                  WHERE bb.limit_id = l.id AND bb.key = p_key FOR UPDATE) b ON true
             WHERE l.name = p_limit;
        END IF;
        IF v_lid IS NULL THEN
            -- As budgetd_fillup alone: the idempotency check first, then BD002.
            v_now := coalesce(p_now, budgetd_clock());
            FOR k IN 1 .. v_n LOOP
                r_doc := NULL;
                r_err_code := budgetd_code_limit_not_found();
                r_err_msg := format('limit "%s" not found', p_limit);
                IF p_idems[k] IS NOT NULL AND p_idems[k] <> '' THEN
                    SELECT i.hash, i.outcome INTO v_hash, v_doc FROM idempotency i
                     WHERE i.scope = p_scopes[k] AND i.key = p_idems[k]
                       AND i.created_at > v_now - budgetd_idempotency_ttl() AND budgetd_limits_exist(i.limit_ids);
                    IF FOUND AND v_hash = p_hashes[k] THEN
                        r_doc := v_doc || '{"replayed": true}'::jsonb;
                        r_err_code := NULL;
                        r_err_msg := NULL;
                    ELSIF FOUND THEN
                        r_err_code := budgetd_code_key_reused();
                        r_err_msg := format('idempotency key "%s" was used with a different request', p_idems[k]);
                    END IF;
                END IF;
                RETURN NEXT;
            END LOOP;
            RETURN;
        END IF;
        v_bfound := coalesce(v_bfound, false);
        v_now := coalesce(p_now, budgetd_clock());
        -- The terms resolved in Go (p_t, migration 0021): for this limit and
        -- an instant of their span, or stale; the versions are checked with
        -- the holds, after the lock.
        IF p_t.limit_id IS DISTINCT FROM v_lid OR p_t.from_us > budgetd_us(v_now) OR p_t.until_us <= budgetd_us(v_now) THEN
            PERFORM budgetd_stale_terms(p_limit, v_now);
        END IF;
        v_l := NULL;
        v_limit := NULL;
        v_ovr := p_t.override;
        -- The holds, under the bucket's lock: what counts now and how many
        -- have expired; when there are any, again in one scan with the
        -- answer's list with and without the expired ones (four ordered
        -- aggregates cost more than the common bucket without holds should
        -- pay).
        SELECT coalesce(sum(h.amount) FILTER (WHERE h.expires_at > v_now), 0),
               count(*) FILTER (WHERE h.expires_at <= v_now), count(*),
               (SELECT budgetd_us(l.updated_at) = p_t.revision_us AND coalesce(l.override_ver, 0) = p_t.override_ver
                  FROM limits l WHERE l.id = v_lid)
          INTO v_held, v_expired, v_j, v_fresh
          FROM holds h
         WHERE h.limit_id = v_lid AND h.key = p_key AND h.state = 'active';
        IF NOT v_fresh THEN
            PERFORM budgetd_stale_terms(p_limit, v_now);
        END IF;
        IF v_bupd < budgetd_from_us(p_t.switch_us) THEN
            -- The bucket crossed the end of a temporary rule change since
            -- its last write: budgetd settles it (in Go) and retries.
            RAISE EXCEPTION 'limit %: bucket % to be settled at an override''s expiry', p_limit, p_key
                USING ERRCODE = budgetd_code_settle(), DETAIL = jsonb_build_object('limit', p_limit, 'key', p_key)::text;
        END IF;
        IF v_ovr IS NOT NULL THEN
            -- The override's terms (deltas: NULL is the limit's own).
            v_cap := p_t.capacity;
            v_lamt := coalesce(p_t.leak_amount, v_lamt);
            v_per := coalesce(p_t.leak_per_us, v_per);
            v_wlen := coalesce(p_t.window_length_us, v_wlen);
            v_wprec := coalesce(p_t.window_precision_us, v_wprec);
            IF p_t.period_tz IS NOT NULL THEN
                v_l := budgetd_terms_limit(v_base, v_lid, p_t, v_now);
                v_starts := v_l.period_starts;
                v_period := budgetd_period_json(v_l);
            END IF;
            v_ceil := CASE v_mode WHEN 'shadow' THEN v_ceil WHEN 'soft' THEN trim_scale(v_cap + v_cap * v_grace * 0.01) ELSE v_cap END;
        END IF;
        -- Then the rollover it receives (budgetd_with_rollover), with the
        -- capacity in force at the end of the period before as Go resolved it.
        v_roll := NULL;
        IF v_rmax IS NOT NULL AND v_bupd IS NOT NULL THEN
            IF v_l.id IS NULL THEN
                v_l := budgetd_terms_limit(v_base, v_lid, p_t, v_now);
            END IF;
            v_l := budgetd_with_rollover(v_l, p_key, v_blevel, v_bupd, v_bcu, v_bcp, v_now, p_t.prev_capacity);
            v_cap := v_l.capacity;
            v_ceil := budgetd_ceiling(v_l);
            v_roll := v_l.rollover;
        END IF;
        -- And its active grants added to its capacity (budgetd_grant_sum).
        v_gsum := NULL;
        IF v_grows > 0 THEN
            v_gsum := budgetd_grant_sum(v_lid, p_key, v_now);
            IF v_gsum > 0 THEN
                IF v_l.id IS NULL THEN
                    v_l := budgetd_terms_limit(v_base, v_lid, p_t, v_now);
                END IF;
                v_l := budgetd_with_grants(v_l, v_gsum);
                v_cap := v_l.capacity;
                v_ceil := budgetd_ceiling(v_l);
            ELSE
                v_gsum := NULL;
            END IF;
        END IF;
        IF v_bupd > v_now THEN
            PERFORM budgetd_note_step(v_bupd, v_now);
        END IF;
        v_all_a := '{}';
        v_all_e := '{}';
        v_live_a := '{}';
        v_live_e := '{}';
        IF v_j > 0 THEN
            SELECT coalesce(sum(h.amount) FILTER (WHERE h.expires_at > v_now), 0),
                   count(*) FILTER (WHERE h.expires_at <= v_now),
                   coalesce(array_agg(h.amount::text ORDER BY h.expires_at, h.id), '{}'),
                   coalesce(array_agg(budgetd_us(h.expires_at) ORDER BY h.expires_at, h.id), '{}'),
                   coalesce(array_agg(h.amount::text ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > v_now), '{}'),
                   coalesce(array_agg(budgetd_us(h.expires_at) ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > v_now), '{}')
              INTO v_held, v_expired, v_all_a, v_all_e, v_live_a, v_live_e
              FROM holds h
             WHERE h.limit_id = v_lid AND h.key = p_key AND h.state = 'active';
        END IF;

        -- The level at v_now, once: the items share the instant.
        IF v_every IS NOT NULL THEN
            v_start := budgetd_period_find(v_starts, v_now, p_limit, v_lid);
        END IF;
        v_level := budgetd_level_at(v_blevel, v_bupd, v_lamt, v_per, v_now, v_start, v_wlen, v_wprec, v_bidx, v_bsum);
        v_before := v_level + v_held;
        v_afters := '{}';
        -- What an answer shows until something is written: the row as stored.
        IF v_bfound THEN
            v_lvl_text := v_blevel::text;
            v_upd_us := budgetd_us(v_bupd);
        ELSE
            v_lvl_text := '0';
            v_upd_us := NULL;
        END IF;
        r_now_us := budgetd_us(v_now);
        v_wrote := false;
        v_widx := NULL;
        v_wsum := NULL;
        a_fits := '{}'; a_level := '{}'; a_upd := '{}'; a_live := '{}'; a_doc := '{}'; a_err := '{}'; a_msg := '{}'; a_wlast := '{}';
        a_entry := '{}'; a_rep := '{}';
        w_events := '{}'; w_shadow := '{}'; w_costs := '{}'; w_metas := '{}'; w_item := '{}'; w_docs := '{}';

        -- Decide, in order.
        FOR k IN 1 .. v_n LOOP
            a_doc[k] := NULL;
            a_err[k] := NULL;
            a_entry[k] := NULL;
            a_rep[k] := NULL;
            IF p_idems[k] IS NOT NULL AND p_idems[k] <> '' THEN
                -- An earlier item of this call with the key: its record is
                -- not written yet, but it counts as written.
                v_j := NULL;
                FOR j IN REVERSE coalesce(array_length(w_item, 1), 0) .. 1 LOOP
                    IF p_scopes[w_item[j]] = p_scopes[k] AND p_idems[w_item[j]] = p_idems[k] THEN
                        v_j := j;
                        EXIT;
                    END IF;
                END LOOP;
                IF v_j IS NOT NULL THEN
                    v_hash := p_hashes[w_item[v_j]];
                    v_doc := w_docs[v_j];
                ELSE
                    -- budgetd_idem_get, inline.
                    SELECT i.hash, i.outcome INTO v_hash, v_doc FROM idempotency i
                     WHERE i.scope = p_scopes[k] AND i.key = p_idems[k]
                       AND i.created_at > v_now - budgetd_idempotency_ttl() AND budgetd_limits_exist(i.limit_ids);
                    IF NOT FOUND THEN
                        v_hash := NULL;
                    END IF;
                END IF;
                IF v_hash IS NOT NULL THEN
                    IF v_hash = p_hashes[k] AND v_j IS NOT NULL THEN
                        -- Answered once that item's entry id is known.
                        a_rep[k] := v_j;
                    ELSIF v_hash = p_hashes[k] THEN
                        a_doc[k] := v_doc || '{"replayed": true}'::jsonb;
                    ELSE
                        a_err[k] := budgetd_code_key_reused();
                        a_msg[k] := format('idempotency key "%s" was used with a different request', p_idems[k]);
                    END IF;
                    CONTINUE;
                END IF;
            END IF;

            v_cost := p_costs[k]::numeric;
            v_fits := budgetd_fits(v_level, v_held, v_cost, v_ceil);
            IF v_fits AND v_cost > 0 THEN
                v_level := trim_scale(v_level + v_cost);
                IF cardinality(v_ths) > 0 THEN
                    v_afters := v_afters || (v_level + v_held);
                END IF;
                IF v_wlen IS NOT NULL AND NOT v_wrote THEN
                    SELECT s.o_idx, s.o_sum INTO v_widx, v_wsum
                      FROM budgetd_window_slots(v_blevel, v_bupd, v_wlen, v_wprec, v_bidx, v_bsum, v_now, v_cost, 0) AS s;
                ELSIF v_wlen IS NOT NULL THEN
                    v_wsum[cardinality(v_wsum)] := trim_scale(v_wsum[cardinality(v_wsum)] + v_cost);
                END IF;
                v_wrote := true;
                v_lvl_text := v_level::text;
                v_upd_us := budgetd_us(CASE WHEN v_bupd IS NULL OR v_bupd < v_now OR v_bupd > v_now + budgetd_clock_step()
                                             THEN v_now ELSE v_bupd END);
                IF v_hist THEN
                    w_events := w_events || 'fillup'::text;
                    -- A shadow limit that records denials flags what enforce would deny.
                    w_shadow := w_shadow || (CASE WHEN v_rec AND v_mode = 'shadow' AND v_level + v_held > v_cap THEN true END);
                    w_costs := w_costs || v_cost;
                    w_metas := w_metas || p_metas[k];
                    a_entry[k] := cardinality(w_costs);
                END IF;
            ELSIF NOT v_fits AND v_hist AND v_rec THEN
                -- A recorded denial: an entry, and nothing else written.
                w_events := w_events || 'denied'::text;
                w_shadow := w_shadow || NULL::boolean;
                w_costs := w_costs || v_cost;
                w_metas := w_metas || p_metas[k];
                a_entry[k] := cardinality(w_costs);
            END IF;
            a_fits[k] := v_fits;
            a_level[k] := v_lvl_text;
            a_upd[k] := v_upd_us;
            a_wlast[k] := CASE WHEN v_wrote AND v_wlen IS NOT NULL THEN v_wsum[cardinality(v_wsum)] END;
            -- Expired holds are recorded by the first write.
            a_live[k] := v_wrote AND v_expired > 0;
            IF p_idems[k] IS NOT NULL AND p_idems[k] <> '' THEN
                -- The document budgetd_fillup answers and stores.
                IF v_limit IS NULL THEN
                    IF v_l.id IS NULL THEN
                        v_l := budgetd_terms_limit(v_base, v_lid, p_t, v_now);
                    END IF;
                    v_limit := budgetd_limit_json(v_l);
                END IF;
                v_doc := jsonb_build_object('accepted', v_fits, 'now_us', r_now_us,
                    'items', jsonb_build_array(jsonb_build_object('fits', v_fits, 'limit', v_limit,
                        'state', jsonb_build_object('level', v_lvl_text, 'updated_us', v_upd_us,
                            'holds', (SELECT coalesce(jsonb_agg(jsonb_build_object('amount', u.a, 'expires_us', u.e) ORDER BY u.o), '[]'::jsonb)
                                        FROM unnest(CASE WHEN a_live[k] THEN v_live_a ELSE v_all_a END,
                                                    CASE WHEN a_live[k] THEN v_live_e ELSE v_all_e END) WITH ORDINALITY AS u(a, e, o)))
                            || CASE WHEN v_wrote THEN budgetd_slots_json(v_widx, v_wsum) ELSE budgetd_slots_json(v_bidx, v_bsum) END,
                        'entry_id', NULL)));
                w_item := w_item || k;
                w_docs := w_docs || v_doc;
            END IF;
        END LOOP;

        -- The threshold rule (budgetd_cross) without its call, when it emits
        -- nothing: the marks it starts from (the bucket's; for marks of
        -- another period none, for marks of another list of thresholds those
        -- that the use before reaches) are the thresholds reached after the
        -- first accepted item and after the last. The uses after the items
        -- only grow (each adds a positive cost to the level, the holds stay)
        -- and reaching (>=) is monotone in the use, so every item in between
        -- reaches the same: no event, and the bucket's write sets the marks
        -- (v_wsig, v_wabove, v_wperiod; v_wsig NULL: as stored). Otherwise
        -- (an event to emit) budgetd_cross runs after the write, as the
        -- rule's one statement of the events and the marks.
        -- Each plpgsql expression costs an initialisation per transaction,
        -- so the common case is one test: the use after the last item below
        -- the lowest amount and the lowest percentage of the capacity (exact:
        -- the capacity is not negative and numeric multiplication never
        -- rounds) reaches nothing, and neither did any use before it; then
        -- nothing is crossed unless the marks, current, hold a threshold
        -- (to recover).
        v_wsig := NULL;
        IF NOT v_wrote OR cardinality(v_ths) = 0 THEN
            NULL;
        ELSIF (v_tamt IS NULL OR v_afters[cardinality(v_afters)] < v_tamt)
              AND (v_tpct IS NULL OR v_afters[cardinality(v_afters)] < v_cap * v_tpct * 0.01)
              AND (coalesce(v_mabove, 0) = 0 OR coalesce(v_msig, 0) <> v_tsig OR coalesce(v_mperiod, 0) <> coalesce(v_start, 0)) THEN
            v_wsig := v_tsig;
            v_wabove := 0;
            v_wperiod := coalesce(v_start, 0);
        ELSE
            v_wperiod := coalesce(v_start, 0);
            v_tabove := 0;
            v_tfirst := 0;
            v_tlast := 0;
            FOR i IN 1 .. cardinality(v_ths) LOOP
                v_tlevel := CASE WHEN right(v_ths[i], 1) = '%' THEN v_cap * left(v_ths[i], -1)::numeric * 0.01 ELSE v_ths[i]::numeric END;
                IF v_before >= v_tlevel THEN
                    v_tabove := v_tabove | (1 << (i - 1));
                END IF;
                IF v_afters[1] >= v_tlevel THEN
                    v_tfirst := v_tfirst | (1 << (i - 1));
                END IF;
                IF v_afters[cardinality(v_afters)] >= v_tlevel THEN
                    v_tlast := v_tlast | (1 << (i - 1));
                END IF;
            END LOOP;
            IF coalesce(v_mperiod, 0) <> v_wperiod THEN
                v_tabove := 0;
            ELSIF coalesce(v_msig, 0) = v_tsig THEN
                v_tabove := coalesce(v_mabove, 0);
            END IF;
            IF v_tfirst = v_tabove AND v_tlast = v_tabove THEN
                v_wsig := v_tsig;
                v_wabove := v_tabove;
            END IF;
        END IF;

        -- Write the bucket once.
        IF v_wrote THEN
            IF v_expired > 0 THEN
                IF v_l.id IS NULL THEN
                    v_l := budgetd_terms_limit(v_base, v_lid, p_t, v_now);
                END IF;
                PERFORM budgetd_expire_holds(v_l, p_key, v_now);
            END IF;
            IF v_bfound AND v_wlen IS NULL AND v_bidx IS NULL AND v_l.rollover_period IS NULL THEN
                -- No slots before or after, no carry to keep: the columns
                -- that would stay as they are are not written.
                UPDATE buckets
                   SET level = v_level,
                       th_sig = coalesce(v_wsig, th_sig), th_above = CASE WHEN v_wsig IS NULL THEN th_above ELSE v_wabove END,
                       th_period = CASE WHEN v_wsig IS NULL THEN th_period ELSE v_wperiod END,
                       updated_at = CASE WHEN updated_at IS NULL OR updated_at < v_now OR updated_at > v_now + budgetd_clock_step()
                                         THEN v_now ELSE updated_at END
                 WHERE limit_id = v_lid AND key = p_key;
            ELSIF v_bfound THEN
                UPDATE buckets
                   SET level = v_level, slot_idx = v_widx, slot_sum = v_wsum,
                       th_sig = coalesce(v_wsig, th_sig), th_above = CASE WHEN v_wsig IS NULL THEN th_above ELSE v_wabove END,
                       th_period = CASE WHEN v_wsig IS NULL THEN th_period ELSE v_wperiod END,
                       carry_unused = CASE WHEN v_l.rollover_period IS NULL THEN carry_unused ELSE v_l.rollover_unused END,
                       carry_period = coalesce(v_l.rollover_period, carry_period),
                       updated_at = CASE WHEN updated_at IS NULL OR updated_at < v_now OR updated_at > v_now + budgetd_clock_step()
                                         THEN v_now ELSE updated_at END
                 WHERE limit_id = v_lid AND key = p_key;
            ELSIF v_wlen IS NULL THEN
                INSERT INTO buckets (limit_id, key, level, updated_at, th_sig, th_above, th_period)
                VALUES (v_lid, p_key, v_level, v_now, coalesce(v_wsig, 0), CASE WHEN v_wsig IS NULL THEN 0 ELSE v_wabove END,
                        CASE WHEN v_wsig IS NULL THEN 0 ELSE v_wperiod END)
                ON CONFLICT DO NOTHING;
                CONTINUE WHEN NOT FOUND;
            ELSE
                INSERT INTO buckets (limit_id, key, level, updated_at, slot_idx, slot_sum, th_sig, th_above, th_period)
                VALUES (v_lid, p_key, v_level, v_now, v_widx, v_wsum,
                        coalesce(v_wsig, 0), CASE WHEN v_wsig IS NULL THEN 0 ELSE v_wabove END,
                        CASE WHEN v_wsig IS NULL THEN 0 ELSE v_wperiod END)
                ON CONFLICT DO NOTHING;
                -- A concurrent call created the bucket first: start over on it.
                CONTINUE WHEN NOT FOUND;
            END IF;
            -- The threshold rule with events, for the accepted items one
            -- after another (budgetd_cross), each event with the use after
            -- its item.
            IF cardinality(v_ths) > 0 AND v_wsig IS NULL THEN
                IF v_l.id IS NULL THEN
                    v_l := budgetd_terms_limit(v_base, v_lid, p_t, v_now);
                END IF;
                PERFORM budgetd_cross(v_l, p_key, coalesce(v_msig, 0), coalesce(v_mabove, 0), coalesce(v_mperiod, 0),
                                      v_before, v_afters, v_now, v_start);
            END IF;
        ELSIF v_bupd > v_now + budgetd_clock_step() THEN
            -- A clock stepped back (reported above): see budgetd_unstep.
            UPDATE buckets SET updated_at = v_now WHERE limit_id = v_lid AND key = p_key;
        ELSIF NOT v_bfound THEN
            -- Nothing charged on a bucket that had no row: a denial is judged
            -- on a locked state, as everywhere (docs/postgres.md, "Locking").
            -- An empty placeholder, inserted and deleted, proves that no
            -- concurrent call created the bucket since this statement's
            -- snapshot; if one did, start over on its row.
            INSERT INTO buckets (limit_id, key, level, updated_at) VALUES (v_lid, p_key, 0, NULL)
            ON CONFLICT DO NOTHING;
            CONTINUE WHEN NOT FOUND;
            DELETE FROM buckets WHERE limit_id = v_lid AND key = p_key;
        END IF;
        EXIT;
    END LOOP;

    -- The history entries, in order: ids grow with insertion, so the i-th
    -- smallest id is the i-th entry. About one insert in 256 trims the bucket
    -- as budgetd_record does. Each item's document gets its entry's id.
    IF coalesce(array_length(w_costs, 1), 0) > 0 THEN
        WITH ins AS (
            INSERT INTO history (limit_id, key, at, event, amount, reservation_id, meta, shadow_denied)
            SELECT v_lid, p_key, v_now, u.e, u.c, NULL, nullif(u.m, '')::jsonb, u.s
              FROM unnest(w_events, w_costs, w_metas, w_shadow) WITH ORDINALITY AS u(e, c, m, s, o) ORDER BY u.o
            RETURNING id)
        SELECT bool_or(id % 256 = 0), array_agg(id ORDER BY id) INTO v_trim, v_ids FROM ins;
        FOR j IN 1 .. coalesce(array_length(w_item, 1), 0) LOOP
            IF a_entry[w_item[j]] IS NOT NULL THEN
                w_docs[j] := jsonb_set(w_docs[j], '{items,0,entry_id}', to_jsonb(v_ids[a_entry[w_item[j]]]::text));
            END IF;
        END LOOP;
        IF v_trim THEN
            DELETE FROM history WHERE id = ANY (ARRAY(
                SELECT id FROM history WHERE limit_id = v_lid AND key = p_key
                 ORDER BY at DESC, id DESC OFFSET budgetd_history_cap() LIMIT 1000));
        END IF;
    END IF;

    -- The idempotency records (budgetd_idem_put, inline). A record that a
    -- concurrent call committed first is not replaced: BD001, and the store
    -- retries the whole call, which then replays it.
    IF coalesce(array_length(w_item, 1), 0) > 0 THEN
        INSERT INTO idempotency AS i (scope, key, hash, limit_ids, outcome, created_at)
        SELECT p_scopes[u.k], p_idems[u.k], p_hashes[u.k], ARRAY[v_lid], u.d, v_now
          FROM unnest(w_item, w_docs) AS u(k, d)
        ON CONFLICT (scope, key) DO UPDATE
           SET hash = EXCLUDED.hash, limit_ids = EXCLUDED.limit_ids, outcome = EXCLUDED.outcome, created_at = EXCLUDED.created_at
         WHERE i.created_at <= EXCLUDED.created_at - budgetd_idempotency_ttl() OR NOT budgetd_limits_exist(i.limit_ids);
        GET DIAGNOSTICS v_j = ROW_COUNT;
        IF v_j <> array_length(w_item, 1) THEN
            RAISE EXCEPTION 'a request with an idempotency key of this call finished first' USING ERRCODE = budgetd_code_idempotency_race();
        END IF;
    END IF;

    -- The answers.
    r_capacity := v_cap::text;
    r_leak_amount := v_lamt::text;
    r_leak_per_us := v_per;
    r_period := v_period;
    r_history := v_hist;
    r_created_us := budgetd_us(v_lcre);
    r_limit_updated_us := budgetd_us(v_lupd);
    r_window_length_us := v_wlen;
    r_window_precision_us := v_wprec;
    r_record_denials := v_rec;
    r_mode := v_mode;
    r_grace := v_grace::text;
    r_thresholds := v_ths;
    r_override := v_ovr;
    r_grants := v_gsum::text;
    r_rollover := v_roll::text;
    FOR k IN 1 .. v_n LOOP
        IF a_rep[k] IS NOT NULL THEN
            a_doc[k] := w_docs[a_rep[k]] || '{"replayed": true}'::jsonb;
        END IF;
        r_doc := a_doc[k];
        r_entry_id := NULL;
        r_err_code := a_err[k];
        r_err_msg := a_msg[k];
        IF r_doc IS NULL AND r_err_code IS NULL THEN
            r_fits := a_fits[k];
            r_level := a_level[k];
            r_updated_us := a_upd[k];
            r_entry_id := v_ids[a_entry[k]]::text;
            IF a_live[k] THEN
                r_hold_amounts := v_live_a;
                r_hold_expires := v_live_e;
            ELSE
                r_hold_amounts := v_all_a;
                r_hold_expires := v_all_e;
            END IF;
            IF a_wlast[k] IS NOT NULL THEN
                r_slot_idx := v_widx;
                r_slot_sums := (v_wsum[1:cardinality(v_wsum) - 1] || a_wlast[k])::text[];
            ELSE
                r_slot_idx := v_bidx;
                r_slot_sums := v_bsum::text[];
            END IF;
        ELSE
            r_fits := NULL;
            r_level := NULL;
            r_updated_us := NULL;
            r_hold_amounts := NULL;
            r_hold_expires := NULL;
            r_slot_idx := NULL;
            r_slot_sums := NULL;
        END IF;
        RETURN NEXT;
    END LOOP;
END $$;
