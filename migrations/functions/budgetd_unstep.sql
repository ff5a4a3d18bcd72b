-- A locked bucket that a call leaves unwritten (a denial) whose stored time
-- is more than budgetd_clock_step() after p_now (the clock was stepped back)
-- gets updated = p_now, as budgetd_write would: otherwise a bucket denied
-- everything would stay full until the clock caught up with its stored time.
CREATE OR REPLACE FUNCTION budgetd_unstep(p_limit_id bigint, p_key text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_old timestamptz;
BEGIN
    UPDATE buckets b SET updated_at = p_now
      FROM (SELECT updated_at FROM buckets WHERE limit_id = p_limit_id AND key = p_key) old
     WHERE b.limit_id = p_limit_id AND b.key = p_key AND b.updated_at > p_now + budgetd_clock_step()
    RETURNING old.updated_at INTO v_old;
    IF FOUND THEN
        PERFORM budgetd_note_step(v_old, p_now);
    END IF;
END $$;
