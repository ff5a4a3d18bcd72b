-- budgetd_idem_race(p_written, p_want): p_written when it is p_want, the
-- count of idempotency records a statement was to write; otherwise one of
-- them was committed first by a concurrent call (the INSERT … ON CONFLICT
-- left it), and it raises BD001, which aborts the transaction (the store's
-- set-based batch, setbatch.go, retries it as budgetd_fillup_batch's
-- callers do, and the retry replays the record).
CREATE OR REPLACE FUNCTION budgetd_idem_race(p_written bigint, p_want bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF p_written <> p_want THEN
        RAISE EXCEPTION 'a request with an idempotency key of this call finished first' USING ERRCODE = budgetd_code_idempotency_race();
    END IF;
    RETURN p_written;
END $$;
