-- Locks the bucket row, inserting an empty placeholder when the bucket was
-- never written. Returns true when it inserted the placeholder: the caller
-- must then write the row or delete it before it commits. Callers lock
-- buckets in (limit_id, key) order.
CREATE OR REPLACE FUNCTION budgetd_lock_bucket(p_limit_id bigint, p_key text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    LOOP
        PERFORM 1 FROM buckets WHERE limit_id = p_limit_id AND key = p_key FOR UPDATE;
        IF FOUND THEN
            RETURN false;
        END IF;
        INSERT INTO buckets (limit_id, key, level, updated_at) VALUES (p_limit_id, p_key, 0, NULL)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN true;
        END IF;
        -- Someone else created it meanwhile: lock theirs.
    END LOOP;
END $$;
