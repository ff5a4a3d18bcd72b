-- Leases (ledger.LeaseStore; SPEC "Alerts before the cap", Push): one row per
-- named lease. holder holds it until expires_at on the database clock ('' and
-- -infinity: free); event_cursor is where the holder's work got to (for the
-- lease "webhook": the outbox cursor before the oldest event not yet
-- delivered or given up), moved only by the holder, kept across holders.
CREATE TABLE leases (
    name         text COLLATE "C" PRIMARY KEY,
    holder       text NOT NULL DEFAULT '',
    expires_at   timestamptz NOT NULL DEFAULT '-infinity',
    event_cursor text NOT NULL DEFAULT ''
);
