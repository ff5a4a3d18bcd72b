-- Records a denial of p_amount (the cost asked) with the caller's meta when
-- the limit keeps history and records denials, and returns the entry's id
-- (NULL when nothing was written). It writes no bucket row: the bucket, its
-- holds and its time stay as they were. The caller holds the bucket's lock
-- (or the placeholder that stands for it).
CREATE OR REPLACE FUNCTION budgetd_record_denial(p_l limits, p_key text, p_at timestamptz, p_amount numeric, p_meta text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    IF NOT p_l.record_denials THEN
        RETURN NULL;
    END IF;
    RETURN budgetd_record(p_l, p_key, p_at, 'denied', p_amount, NULL, p_meta);
END $$;
