-- Thresholds and their events (SPEC "Alerts before the cap", docs/alerts.md).
-- limits.thresholds lists a limit's thresholds as the limit document has them
-- ("80%" or "4500"), in order, and limits.th_sig is their ledger.ThresholdSig
-- (computed by budgetd, stored as the signed 32-bit integer of the same bits;
-- 0 for none). A bucket keeps its ledger.Marks in three small columns, all
-- zero for a bucket of a limit without thresholds.
ALTER TABLE limits ADD COLUMN thresholds text[] NOT NULL DEFAULT '{}';
ALTER TABLE limits ADD COLUMN th_sig integer NOT NULL DEFAULT 0;
ALTER TABLE buckets ADD COLUMN th_sig integer NOT NULL DEFAULT 0;
ALTER TABLE buckets ADD COLUMN th_above smallint NOT NULL DEFAULT 0;
ALTER TABLE buckets ADD COLUMN th_period bigint NOT NULL DEFAULT 0;

-- The outbox: one row per event, written by the write that emitted it, in
-- the same transaction. id orders the events of one bucket (taken under the
-- bucket's row lock); pos is the position in the listing, NULL until
-- budgetd_seal_events gives it, in id order, to the events that are visible.
CREATE TABLE events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pos          bigint UNIQUE,
    at           timestamptz NOT NULL,
    limit_name   text COLLATE "C" NOT NULL,
    key          text COLLATE "C" NOT NULL,
    type         text NOT NULL CHECK (type IN ('threshold.crossed', 'threshold.recovered')),
    threshold    text NOT NULL,
    used         numeric NOT NULL,
    capacity     numeric NOT NULL,
    period_start timestamptz
);
CREATE INDEX events_unsealed ON events (id) WHERE pos IS NULL;
CREATE INDEX events_at ON events (at);
CREATE SEQUENCE budgetd_event_pos;
