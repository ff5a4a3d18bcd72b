-- History: records due expiries of the bucket, then lists up to p_n + 1
-- entries older than (p_after_us, p_after_id), newest first.
CREATE OR REPLACE FUNCTION budgetd_history(p_limit text, p_key text, p_after_us bigint, p_after_id bigint, p_n int, p_now timestamptz)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_l     limits := budgetd_limit(p_limit);
    v_now   timestamptz;
    v_after timestamptz := budgetd_from_us(p_after_us);
BEGIN
    IF NOT v_l.history THEN
        RETURN '[]'::jsonb;
    END IF;
    v_now := coalesce(p_now, budgetd_clock());
    IF EXISTS (SELECT 1 FROM holds WHERE limit_id = v_l.id AND key = p_key AND state = 'active' AND expires_at <= v_now) THEN
        PERFORM 1 FROM buckets WHERE limit_id = v_l.id AND key = p_key FOR UPDATE;
        PERFORM budgetd_expire_holds(v_l, p_key, v_now);
    END IF;
    RETURN coalesce((
        SELECT jsonb_agg(jsonb_build_object('id', h.id::text, 'at_us', budgetd_us(h.at), 'event', h.event,
                                            'amount', h.amount::text, 'reservation_id', h.reservation_id)
                         || CASE WHEN h.meta IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('meta', h.meta) END
                         || CASE WHEN h.shadow_denied THEN '{"shadow_denied": true}'::jsonb ELSE '{}'::jsonb END
                         || CASE WHEN h.grant_id IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('grant_id', h.grant_id) END
                         ORDER BY h.at DESC, h.id DESC)
          FROM (SELECT * FROM history
                 WHERE limit_id = v_l.id AND key = p_key
                   AND (p_after_us IS NULL OR (at, id) < (v_after, p_after_id))
                 ORDER BY at DESC, id DESC
                 LIMIT p_n + 1) h), '[]'::jsonb);
END $$;
