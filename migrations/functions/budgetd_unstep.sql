-- A locked bucket that a call leaves unwritten (a denial) whose stored time
-- is more than budgetd_clock_step() after p_now (the clock was stepped back)
-- gets updated = p_now, as budgetd_write would: otherwise a bucket denied
-- everything would stay full until the clock caught up with its stored time.
CREATE OR REPLACE FUNCTION budgetd_unstep(p_limit_id bigint, p_key text, p_now timestamptz) RETURNS void
LANGUAGE sql AS $$
    UPDATE buckets SET updated_at = p_now
     WHERE limit_id = p_limit_id AND key = p_key AND updated_at > p_now + budgetd_clock_step()
$$;
