-- Up to p_n events after position p_after, in position order, once the
-- events visible now are sealed. Sealing gives the events that have no
-- position yet the next positions, in id order, under a transaction-level
-- advisory lock (one sealer at a time per schema): an event is sealed only
-- once the write that emitted it committed, a later write of the same
-- bucket emits its events only after the earlier one committed (it waits
-- for the bucket's row lock) with larger ids, so each bucket's events get
-- positions in the order of its writes, and no position is given below one
-- a reader may already have passed. The caller runs it at READ COMMITTED
-- (each statement sees what committed before it, the seal included) and
-- commits at once.
CREATE OR REPLACE FUNCTION budgetd_events(p_after bigint, p_n int)
RETURNS TABLE (r_pos bigint, r_at timestamptz, r_limit text, r_key text, r_type text, r_threshold text,
               r_used text, r_capacity text, r_period_start timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('budgetd.events'), hashtext(current_schema()));
    UPDATE events e SET pos = s.p
      FROM (SELECT o.id, nextval('budgetd_event_pos') AS p
              FROM (SELECT id FROM events WHERE pos IS NULL ORDER BY id) o) s
     WHERE e.id = s.id;
    RETURN QUERY
        SELECT e.pos, e.at, e.limit_name::text, e.key::text, e.type, e.threshold, e.used::text, e.capacity::text, e.period_start
          FROM events e WHERE e.pos > p_after ORDER BY e.pos LIMIT p_n;
END $$;
