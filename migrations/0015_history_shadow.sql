-- Shadow denials in the history (docs/modes.md, "Shadow denials in the
-- history"): a fillup or reserved entry that a shadow limit with
-- record_denials accepted although enforce would have denied it is flagged
-- true; every other entry keeps NULL, so the column costs nothing where it
-- is not used and adding it rewrites no row.
ALTER TABLE history ADD COLUMN shadow_denied boolean;
