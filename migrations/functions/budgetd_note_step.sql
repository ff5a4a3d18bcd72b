-- Reports a bucket whose stored time p_updated is more than
-- budgetd_clock_step() after p_now (the clock was stepped back; the caller
-- treats it as now): a notice with SQLSTATE budgetd_code_clock_step(), which
-- the store counts and logs.
CREATE OR REPLACE FUNCTION budgetd_note_step(p_updated timestamptz, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_updated > p_now + budgetd_clock_step() THEN
        RAISE NOTICE USING ERRCODE = budgetd_code_clock_step(),
            MESSAGE = format('a bucket updated at %s is ahead of now, %s: the clock was stepped back; the bucket''s time is taken as now',
                             p_updated, p_now);
    END IF;
END $$;
