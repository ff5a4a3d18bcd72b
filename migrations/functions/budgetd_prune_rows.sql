-- Deletes up to p_batch each of: holds resolved or expired more than 24h ago,
-- history older than 30 days, idempotency records older than 25h, events
-- older than 7 days.
CREATE OR REPLACE FUNCTION budgetd_prune_rows(p_now timestamptz, p_batch int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n     int;
    v_total int := 0;
BEGIN
    DELETE FROM holds WHERE id = ANY (ARRAY(
        SELECT id FROM holds
         WHERE expires_at < p_now - budgetd_closed_hold_retention() AND state <> 'active'
           AND coalesce(resolved_at, expires_at) < p_now - budgetd_closed_hold_retention()
         LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM history WHERE id = ANY (ARRAY(
        SELECT id FROM history WHERE at < p_now - budgetd_history_retention() LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM events WHERE id = ANY (ARRAY(
        SELECT id FROM events WHERE at < p_now - budgetd_event_retention() LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM idempotency WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM idempotency WHERE created_at < p_now - budgetd_idempotency_retention() LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    RETURN v_total;
END $$;
