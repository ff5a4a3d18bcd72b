-- Records expired holds as expired, for up to p_batch of them.
CREATE OR REPLACE FUNCTION budgetd_prune_expired(p_now timestamptz, p_batch int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_r record;
    v_l limits;
    v_n int := 0;
BEGIN
    FOR v_r IN SELECT DISTINCT s.limit_id, s.key
                 FROM (SELECT limit_id, key FROM holds
                        WHERE state = 'active' AND expires_at <= p_now
                        ORDER BY expires_at LIMIT p_batch) s LOOP
        SELECT * INTO v_l FROM limits WHERE id = v_r.limit_id;
        IF NOT FOUND THEN
            -- The limit was deleted: no history to write.
            UPDATE holds SET state = 'expired', resolved_at = expires_at
             WHERE limit_id = v_r.limit_id AND key = v_r.key AND state = 'active' AND expires_at <= p_now;
            v_n := v_n + 1;
            CONTINUE;
        END IF;
        PERFORM 1 FROM buckets WHERE limit_id = v_r.limit_id AND key = v_r.key FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            PERFORM budgetd_expire_holds(v_l, v_r.key, p_now);
            v_n := v_n + 1;
        END IF;
    END LOOP;
    RETURN v_n;
END $$;
