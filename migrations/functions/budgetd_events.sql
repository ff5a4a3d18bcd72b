-- Up to p_n events after position p_after, in position order, once the
-- events visible now are sealed (budgetd_seal_events). Sealing gives the
-- events that have no position yet the next positions, in id order, under a
-- transaction-level advisory lock: an event is sealed only once the write
-- that emitted it committed, a later write of the same bucket emits its
-- events only after the earlier one committed (it waits for the bucket's row
-- lock) with larger ids, so each bucket's events get positions in the order
-- of its writes, and no position is given below one a reader may already
-- have passed. The caller runs it at READ COMMITTED (each statement sees what
-- committed before it, the seal included) and commits at once.
CREATE OR REPLACE FUNCTION budgetd_events(p_after bigint, p_n int)
RETURNS TABLE (r_pos bigint, r_at timestamptz, r_limit text, r_key text, r_type text, r_threshold text,
               r_used text, r_capacity text, r_period_start timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM budgetd_seal_events();
    RETURN QUERY
        SELECT e.pos, e.at, e.limit_name::text, e.key::text, e.type, e.threshold, e.used::text, e.capacity::text, e.period_start
          FROM events e WHERE e.pos > p_after ORDER BY e.pos LIMIT p_n;
END $$;
