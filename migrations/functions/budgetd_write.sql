-- Writes a locked bucket: the new level, and updated moved to p_now unless
-- that would move it back. A stored time more than budgetd_clock_step() after
-- p_now can only come from a clock that was stepped back: it is treated as
-- now, so the bucket leaks again from p_now instead of waiting for the clock
-- to catch up.
CREATE OR REPLACE FUNCTION budgetd_write(p_limit_id bigint, p_key text, p_level numeric, p_now timestamptz) RETURNS void
LANGUAGE sql AS $$
    UPDATE buckets
       SET level = trim_scale(p_level),
           updated_at = CASE WHEN updated_at IS NULL OR updated_at < p_now OR updated_at > p_now + budgetd_clock_step()
                             THEN p_now ELSE updated_at END
     WHERE limit_id = p_limit_id AND key = p_key
$$;
