-- 0004_fillup_batch: every single-bucket Fillup, alone or coalesced, with or
-- without an Idempotency-Key, through one function that answers in columns.
--
-- budgetd_fillup (0002) spends a good part of its server time building the
-- jsonb answer (the limit document, the state, the items array: ≈ 30 µs a
-- call on the benchmark machine) that budgetd then parses again, calls a
-- helper per step (lock, record) and inserts then re-reads a placeholder row
-- for a bucket never written. budgetd_fillup_seq (0003) coalesces the Fillups
-- of a hot bucket but only those without an Idempotency-Key, and answers a
-- jsonb document per call.
--
-- budgetd_fillup_batch(limit, key, costs[], now, scopes[], idems[], hashes[])
-- decides the costs one after another, in the order given, at one instant,
-- under one lock of the bucket row: each exactly as budgetd_fillup would
-- decide it as the next call on the bucket. Per item:
--   * with an Idempotency-Key, a live record (24 h, its limits still exist) is
--     replayed (same hash: its outcome with "replayed": true) or refused
--     (another hash: err_code BD006) without touching the bucket. Records
--     written by earlier items of the same call are visible, so a duplicate
--     inside a batch replays the first one's answer, as it would alone;
--   * otherwise the cost is accepted or denied on its own, an accepted one
--     gets its own history entry, and an item with a key gets its own
--     idempotency record holding the same document budgetd_fillup stores. A
--     record that a concurrent transaction committed first raises BD001: the
--     whole call rolls back and the store retries it, which then replays.
-- A missing limit is answered per item (BD002, after the item's idempotency
-- check, as budgetd_fillup orders them); no other error is per item: any
-- other failure fails the whole call, and so every caller in it.
--
-- One row per item, in order: fits, the bucket right after the item (level
-- as text, updated µs, active holds as two arrays) and the shared now and
-- limit; or doc (an idempotent replay, the stored jsonb); or err_code and
-- err_msg. budgetd_fillup and budgetd_fillup_seq stay for budgetd processes
-- of the previous version during a rolling upgrade and for multi-bucket calls.

CREATE FUNCTION budgetd_fillup_batch(p_limit text, p_key text, p_costs text[], p_now timestamptz,
                                     p_scopes text[], p_idems text[], p_hashes text[])
RETURNS TABLE (r_fits boolean, r_level text, r_updated_us bigint, r_hold_amounts text[], r_hold_expires bigint[],
               r_now_us bigint, r_capacity text, r_leak_amount text, r_leak_per_us bigint, r_history boolean,
               r_created_us bigint, r_limit_updated_us bigint, r_doc jsonb, r_err_code text, r_err_msg text)
LANGUAGE plpgsql AS $$
DECLARE
    v_n        int := coalesce(array_length(p_costs, 1), 0);
    v_now      timestamptz;
    v_l        limits;
    v_b        buckets;
    v_created  boolean := false;
    v_held     numeric;
    v_expired  bigint;
    v_all_a    text[];
    v_all_e    bigint[];
    v_live_a   text[];
    v_live_e   bigint[];
    v_us       bigint;
    v_level    numeric;
    v_cost     numeric;
    v_fits     boolean;
    v_wrote    boolean := false;
    v_lvl_text text;
    v_upd_us   bigint;
    v_limit    jsonb;
    v_idem     boolean;
    v_hash     text;
    v_doc      jsonb;
    v_hid      bigint;
BEGIN
    SELECT * INTO v_l FROM limits WHERE name = p_limit;
    IF NOT FOUND THEN
        v_now := coalesce(p_now, budgetd_clock());
        FOR k IN 1 .. v_n LOOP
            r_doc := NULL;
            r_err_code := 'BD002';
            r_err_msg := format('limit "%s" not found', p_limit);
            IF p_idems[k] IS NOT NULL AND p_idems[k] <> '' THEN
                SELECT i.hash, i.outcome INTO v_hash, v_doc FROM idempotency i
                 WHERE i.scope = p_scopes[k] AND i.key = p_idems[k]
                   AND i.created_at > v_now - interval '24 hours' AND budgetd_limits_exist(i.limit_ids);
                IF FOUND AND v_hash = p_hashes[k] THEN
                    r_doc := v_doc || '{"replayed": true}'::jsonb;
                    r_err_code := NULL;
                    r_err_msg := NULL;
                ELSIF FOUND THEN
                    r_err_code := 'BD006';
                    r_err_msg := format('idempotency key "%s" was used with a different request', p_idems[k]);
                END IF;
            END IF;
            RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;

    -- Lock the bucket; a bucket never written gets a placeholder row, which
    -- is written or deleted before the end.
    LOOP
        SELECT * INTO v_b FROM buckets WHERE limit_id = v_l.id AND key = p_key FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO buckets (limit_id, key, level, updated_at) VALUES (v_l.id, p_key, 0, NULL)
        ON CONFLICT DO NOTHING
        RETURNING * INTO v_b;
        IF FOUND THEN
            v_created := true;
            EXIT;
        END IF;
        -- Someone else created it meanwhile: lock theirs.
    END LOOP;
    v_now := coalesce(p_now, budgetd_clock());

    -- The holds in one scan: what counts now, how many have expired, and the
    -- answer's list with and without the expired ones.
    SELECT coalesce(sum(h.amount) FILTER (WHERE h.expires_at > v_now), 0),
           count(*) FILTER (WHERE h.expires_at <= v_now),
           coalesce(array_agg(h.amount::text ORDER BY h.expires_at, h.id), '{}'),
           coalesce(array_agg(budgetd_us(h.expires_at) ORDER BY h.expires_at, h.id), '{}'),
           coalesce(array_agg(h.amount::text ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > v_now), '{}'),
           coalesce(array_agg(budgetd_us(h.expires_at) ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > v_now), '{}')
      INTO v_held, v_expired, v_all_a, v_all_e, v_live_a, v_live_e
      FROM holds h
     WHERE h.limit_id = v_l.id AND h.key = p_key AND h.state = 'active';

    -- The level at v_now (budgetd_level_at), once: the items share the instant.
    v_level := greatest(v_b.level, 0);
    IF v_b.level > 0 AND v_b.updated_at IS NOT NULL THEN
        v_us := budgetd_us(v_now) - budgetd_us(v_b.updated_at);
        IF v_us > 0 THEN
            v_level := greatest(v_b.level - div(v_l.leak_amount * v_us * 1000000000000, v_l.leak_per_us) * 0.000000000001, 0);
        END IF;
    END IF;
    -- What an answer shows until something is written: the row as stored.
    IF v_created THEN
        v_lvl_text := '0';
        v_upd_us := NULL;
    ELSE
        v_lvl_text := v_b.level::text;
        v_upd_us := budgetd_us(v_b.updated_at);
    END IF;
    r_now_us := budgetd_us(v_now);
    r_capacity := v_l.capacity::text;
    r_leak_amount := v_l.leak_amount::text;
    r_leak_per_us := v_l.leak_per_us;
    r_history := v_l.history;
    r_created_us := budgetd_us(v_l.created_at);
    r_limit_updated_us := budgetd_us(v_l.updated_at);

    FOR k IN 1 .. v_n LOOP
        r_fits := NULL;
        r_level := NULL;
        r_updated_us := NULL;
        r_hold_amounts := NULL;
        r_hold_expires := NULL;
        r_doc := NULL;
        r_err_code := NULL;
        r_err_msg := NULL;
        v_idem := p_idems[k] IS NOT NULL AND p_idems[k] <> '';
        IF v_idem THEN
            -- budgetd_idem_get, inline; it sees the records of earlier items.
            SELECT i.hash, i.outcome INTO v_hash, v_doc FROM idempotency i
             WHERE i.scope = p_scopes[k] AND i.key = p_idems[k]
               AND i.created_at > v_now - interval '24 hours' AND budgetd_limits_exist(i.limit_ids);
            IF FOUND THEN
                IF v_hash = p_hashes[k] THEN
                    r_doc := v_doc || '{"replayed": true}'::jsonb;
                ELSE
                    r_err_code := 'BD006';
                    r_err_msg := format('idempotency key "%s" was used with a different request', p_idems[k]);
                END IF;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;

        v_cost := p_costs[k]::numeric;
        v_fits := v_cost = 0 OR v_level + v_held + v_cost <= v_l.capacity;
        IF v_fits AND v_cost > 0 THEN
            IF NOT v_wrote AND v_expired > 0 THEN
                PERFORM budgetd_expire_holds(v_l, p_key, v_now);
                v_all_a := v_live_a;
                v_all_e := v_live_e;
            END IF;
            v_level := trim_scale(v_level + v_cost);
            v_wrote := true;
            v_lvl_text := v_level::text;
            v_upd_us := budgetd_us(CASE WHEN v_b.updated_at IS NULL OR v_b.updated_at < v_now THEN v_now ELSE v_b.updated_at END);
            IF v_l.history THEN
                -- budgetd_record, inline.
                INSERT INTO history (limit_id, key, at, event, amount, reservation_id)
                VALUES (v_l.id, p_key, v_now, 'fillup', v_cost, NULL)
                RETURNING id INTO v_hid;
                IF v_hid % 256 = 0 THEN
                    DELETE FROM history WHERE id = ANY (ARRAY(
                        SELECT id FROM history WHERE limit_id = v_l.id AND key = p_key
                         ORDER BY at DESC, id DESC OFFSET 10000 LIMIT 1000));
                END IF;
            END IF;
        END IF;
        r_fits := v_fits;
        r_level := v_lvl_text;
        r_updated_us := v_upd_us;
        r_hold_amounts := v_all_a;
        r_hold_expires := v_all_e;

        IF v_idem THEN
            -- The document budgetd_fillup answers and stores.
            IF v_limit IS NULL THEN
                v_limit := budgetd_limit_json(v_l);
            END IF;
            v_doc := jsonb_build_object('accepted', v_fits, 'now_us', r_now_us,
                'items', jsonb_build_array(jsonb_build_object('fits', v_fits, 'limit', v_limit,
                    'state', jsonb_build_object('level', v_lvl_text, 'updated_us', v_upd_us,
                        'holds', (SELECT coalesce(jsonb_agg(jsonb_build_object('amount', u.a, 'expires_us', u.e) ORDER BY u.o), '[]'::jsonb)
                                    FROM unnest(v_all_a, v_all_e) WITH ORDINALITY AS u(a, e, o))))));
            -- budgetd_idem_put, inline.
            INSERT INTO idempotency AS i (scope, key, hash, limit_ids, outcome, created_at)
            VALUES (p_scopes[k], p_idems[k], p_hashes[k], ARRAY[v_l.id], v_doc, v_now)
            ON CONFLICT (scope, key) DO UPDATE
               SET hash = EXCLUDED.hash, limit_ids = EXCLUDED.limit_ids, outcome = EXCLUDED.outcome, created_at = EXCLUDED.created_at
             WHERE i.created_at <= EXCLUDED.created_at - interval '24 hours' OR NOT budgetd_limits_exist(i.limit_ids);
            IF NOT FOUND THEN
                RAISE EXCEPTION 'a request with idempotency key "%" finished first', p_idems[k] USING ERRCODE = 'BD001';
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;

    IF v_wrote THEN
        UPDATE buckets
           SET level = v_level,
               updated_at = CASE WHEN updated_at IS NULL OR updated_at < v_now THEN v_now ELSE updated_at END
         WHERE limit_id = v_l.id AND key = p_key;
    ELSIF v_created THEN
        DELETE FROM buckets WHERE limit_id = v_l.id AND key = p_key;
    END IF;
END $$;
