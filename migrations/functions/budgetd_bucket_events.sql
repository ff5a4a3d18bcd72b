-- Up to p_n of the events kept for the bucket (p_limit, p_key), newest
-- first, once the events visible now are sealed (so each has the position
-- GET /v1/events lists it by). Same columns and caller's duty as
-- budgetd_events. The events of a deleted limit of the same name are kept
-- (until their retention) and listed too.
CREATE OR REPLACE FUNCTION budgetd_bucket_events(p_limit text, p_key text, p_n int)
RETURNS TABLE (r_pos bigint, r_at timestamptz, r_limit text, r_key text, r_type text, r_threshold text,
               r_used text, r_capacity text, r_period_start timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM budgetd_seal_events();
    RETURN QUERY
        SELECT e.pos, e.at, e.limit_name::text, e.key::text, e.type, e.threshold, e.used::text, e.capacity::text, e.period_start
          FROM events e
         WHERE e.limit_name = p_limit AND e.key = p_key AND e.pos IS NOT NULL
         ORDER BY e.pos DESC LIMIT p_n;
END $$;
