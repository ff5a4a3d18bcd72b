-- Adds a history entry when the limit keeps history, with the caller's meta
-- (JSON text; NULL or '' for none), and returns its id (NULL when the limit
-- keeps no history). p_shadow true flags a shadow-denied fillup or reserved
-- entry (history.shadow_denied; NULL otherwise); p_grant is the grant of a
-- granted or revoked entry (history.grant_id; NULL otherwise). The caller holds the
-- bucket's lock. About one insert in 256 (by id) also trims the bucket to its
-- newest 10,000 entries, at most 1,000 rows at a time, so a busy bucket stays
-- near that cap without a per-insert cost.
CREATE OR REPLACE FUNCTION budgetd_record(p_l limits, p_key text, p_at timestamptz, p_event text, p_amount numeric, p_res text,
                                          p_meta text DEFAULT NULL, p_shadow boolean DEFAULT NULL, p_grant text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    IF NOT p_l.history THEN
        RETURN NULL;
    END IF;
    INSERT INTO history (limit_id, key, at, event, amount, reservation_id, meta, shadow_denied, grant_id)
    VALUES (p_l.id, p_key, p_at, p_event, p_amount, p_res, nullif(p_meta, '')::jsonb, CASE WHEN p_shadow THEN true END, p_grant)
    RETURNING id INTO v_id;
    IF v_id % 256 = 0 THEN
        DELETE FROM history WHERE id = ANY (ARRAY(
            SELECT id FROM history WHERE limit_id = p_l.id AND key = p_key
             ORDER BY at DESC, id DESC OFFSET budgetd_history_cap() LIMIT 1000));
    END IF;
    RETURN v_id;
END $$;
