-- Records the holds of a bucket that have expired by p_now (time = expires_at).
-- The caller holds the bucket's lock.
CREATE OR REPLACE FUNCTION budgetd_expire_holds(p_l limits, p_key text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    WITH e AS (
        UPDATE holds SET state = 'expired', resolved_at = expires_at
         WHERE limit_id = p_l.id AND key = p_key AND state = 'active' AND expires_at <= p_now
        RETURNING id, amount, expires_at)
    INSERT INTO history (limit_id, key, at, event, amount, reservation_id)
    SELECT p_l.id, p_key, e.expires_at, 'expired', e.amount, e.id
      FROM e WHERE p_l.history
     ORDER BY e.expires_at, e.id;
END $$;
