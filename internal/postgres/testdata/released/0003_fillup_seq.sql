-- 0003_fillup_seq: many single-bucket Fillups of one bucket in one call.
--
-- On a hot bucket every Fillup waits for the row lock, which the one before
-- it holds until its commit has been flushed: one call per lock and per WAL
-- flush. The PostgreSQL store therefore queues the concurrent single-bucket
-- Fillups (without an Idempotency-Key) of one bucket inside budgetd and sends
-- the waiting ones as one call of this function (internal/postgres,
-- coalesce.go). It decides them one after another, in the order given, at one
-- instant: each cost is accepted or denied on its own exactly as
-- budgetd_fillup would decide it as the next call on the bucket (no item
-- depends on another's acceptance except through the level), and each
-- accepted one gets its own history entry. The answer is a jsonb array of
-- budgetd_fillup answers, one per cost, each with the bucket as it stood right
-- after that item.

CREATE FUNCTION budgetd_fillup_seq(p_limit text, p_key text, p_costs text[], p_now timestamptz)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_now       timestamptz;
    v_l         limits;
    v_b         buckets;
    v_created   boolean := false;
    v_held      numeric;
    v_expired   bigint;
    v_all       jsonb;
    v_live      jsonb;
    v_us        bigint;
    v_level     numeric;
    v_cost      numeric;
    v_fits      boolean;
    v_wrote     boolean := false;
    v_lvl_text  text;
    v_upd_us    bigint;
    v_limit     jsonb;
    v_answers   jsonb[] := '{}';
BEGIN
    SELECT * INTO v_l FROM limits WHERE name = p_limit;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'limit "%" not found', p_limit USING ERRCODE = 'BD002';
    END IF;
    SELECT * INTO v_b FROM buckets WHERE limit_id = v_l.id AND key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        v_created := budgetd_lock_bucket(v_l.id, p_key);
        SELECT * INTO v_b FROM buckets WHERE limit_id = v_l.id AND key = p_key;
    END IF;
    v_now := coalesce(p_now, budgetd_clock());

    SELECT coalesce(sum(h.amount) FILTER (WHERE h.expires_at > v_now), 0),
           count(*) FILTER (WHERE h.expires_at <= v_now),
           coalesce(jsonb_agg(jsonb_build_object('amount', h.amount::text, 'expires_us', budgetd_us(h.expires_at))
                              ORDER BY h.expires_at, h.id), '[]'::jsonb),
           coalesce(jsonb_agg(jsonb_build_object('amount', h.amount::text, 'expires_us', budgetd_us(h.expires_at))
                              ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > v_now), '[]'::jsonb)
      INTO v_held, v_expired, v_all, v_live
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
    -- What a denied item's answer shows until something is written: the row as stored.
    IF v_created THEN
        v_lvl_text := '0';
        v_upd_us := NULL;
    ELSE
        v_lvl_text := v_b.level::text;
        v_upd_us := budgetd_us(v_b.updated_at);
    END IF;
    v_limit := budgetd_limit_json(v_l);

    FOR i IN 1 .. coalesce(array_length(p_costs, 1), 0) LOOP
        v_cost := p_costs[i]::numeric;
        v_fits := v_cost = 0 OR v_level + v_held + v_cost <= v_l.capacity;
        IF v_fits AND v_cost > 0 THEN
            IF NOT v_wrote AND v_expired > 0 THEN
                PERFORM budgetd_expire_holds(v_l, p_key, v_now);
                v_all := v_live;
            END IF;
            v_level := trim_scale(v_level + v_cost);
            v_wrote := true;
            v_lvl_text := v_level::text;
            v_upd_us := budgetd_us(CASE WHEN v_b.updated_at IS NULL OR v_b.updated_at < v_now THEN v_now ELSE v_b.updated_at END);
            IF v_l.history THEN
                PERFORM budgetd_record(v_l, p_key, v_now, 'fillup', v_cost, NULL);
            END IF;
        END IF;
        v_answers := v_answers || jsonb_build_object('accepted', v_fits, 'now_us', budgetd_us(v_now),
            'items', jsonb_build_array(jsonb_build_object('fits', v_fits, 'limit', v_limit,
                'state', jsonb_build_object('level', v_lvl_text, 'updated_us', v_upd_us, 'holds', v_all))));
    END LOOP;

    IF v_wrote THEN
        UPDATE buckets
           SET level = v_level,
               updated_at = CASE WHEN updated_at IS NULL OR updated_at < v_now THEN v_now ELSE updated_at END
         WHERE limit_id = v_l.id AND key = p_key;
    ELSIF v_created THEN
        DELETE FROM buckets WHERE limit_id = v_l.id AND key = p_key;
    END IF;
    RETURN to_jsonb(v_answers);
END $$;
