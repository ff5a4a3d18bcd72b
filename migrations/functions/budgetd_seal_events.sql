-- Seals the events visible now: gives those that have no position yet the
-- next positions, in id order, under a transaction-level advisory lock (one
-- sealer at a time per schema). budgetd_events says why this keeps each
-- bucket's events in the order of its writes and leaves no gap behind a
-- reader. The caller runs at READ COMMITTED and commits at once.
CREATE OR REPLACE FUNCTION budgetd_seal_events() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('budgetd.events'), hashtext(current_schema()));
    UPDATE events e SET pos = s.p
      FROM (SELECT o.id, nextval('budgetd_event_pos') AS p
              FROM (SELECT id FROM events WHERE pos IS NULL ORDER BY id) o) s
     WHERE e.id = s.id;
END $$;
