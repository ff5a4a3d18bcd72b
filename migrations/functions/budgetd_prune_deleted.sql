-- Deletes up to p_batch rows of each table for one deleted limit; forgets the
-- limit once nothing is left. Returns the rows deleted (a forgotten limit
-- counts one); 0 when no deleted limit is waiting.
CREATE OR REPLACE FUNCTION budgetd_prune_deleted(p_batch int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_id    bigint;
    v_n     int;
    v_total int := 0;
BEGIN
    SELECT id INTO v_id FROM deleted_limits ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    DELETE FROM buckets WHERE ctid = ANY (ARRAY(SELECT ctid FROM buckets WHERE limit_id = v_id LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM holds WHERE id = ANY (ARRAY(SELECT id FROM holds WHERE limit_id = v_id LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM history WHERE id = ANY (ARRAY(SELECT id FROM history WHERE limit_id = v_id LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM overrides WHERE ctid = ANY (ARRAY(SELECT ctid FROM overrides WHERE limit_id = v_id LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM grants WHERE ctid = ANY (ARRAY(SELECT ctid FROM grants WHERE limit_id = v_id LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    -- Less than a batch everywhere: nothing of the limit is left.
    IF v_total < p_batch THEN
        DELETE FROM deleted_limits WHERE id = v_id;
        v_total := v_total + 1;
    END IF;
    RETURN v_total;
END $$;
