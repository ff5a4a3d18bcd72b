-- Denials in the history (SPEC "Every transaction recorded, denials
-- included"): a limit that keeps history and records denials writes a
-- 'denied' entry (the cost asked and the call's meta) for every denied
-- Fillup, Reserve or multi-bucket item, without touching its bucket.
-- record_denials defaults to false, what every limit did before.
ALTER TABLE limits ADD COLUMN record_denials boolean NOT NULL DEFAULT false;
ALTER TABLE history DROP CONSTRAINT history_event_check;
ALTER TABLE history ADD CONSTRAINT history_event_check
    CHECK (event IN ('fillup', 'drain', 'reserved', 'committed', 'released', 'expired', 'denied'));
