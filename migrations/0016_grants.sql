-- Grants: top-ups of one bucket's capacity until expires_at (SPEC "Terms per
-- customer", docs/terms.md). A grant is the row (limit_id, key, id), its
-- id shown as "g" and the number; amount is exact (numeric). A revoked grant
-- is deleted; an expired one counts no more from expires_at on and is
-- deleted by the pruner (budgetd_prune_grants, through grants_expires). A
-- deleted limit's grants go with its other rows (budgetd_prune_deleted).
CREATE TABLE grants (
    limit_id   bigint NOT NULL,
    key        text COLLATE "C" NOT NULL,
    id         bigint GENERATED ALWAYS AS IDENTITY,
    amount     numeric NOT NULL CHECK (amount > 0 AND amount <= 1000000000000),
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (limit_id, key, id)
);
CREATE INDEX grants_expires ON grants (expires_at);

-- limits.grant_rows counts the limit's rows in grants (expired ones not yet
-- pruned included): a decision on a limit without any sums nothing
-- (budgetd_terms). limits.grant_sum is NULL in every stored row: a limit
-- value with a bucket's active grants added to its capacity
-- (budgetd_with_grants) holds their sum there.
ALTER TABLE limits ADD COLUMN grant_rows int NOT NULL DEFAULT 0;
ALTER TABLE limits ADD COLUMN grant_sum numeric;
-- The grant of a granted or revoked entry ("g" and its id); NULL otherwise;
-- and the two events.
ALTER TABLE history ADD COLUMN grant_id text;
ALTER TABLE history DROP CONSTRAINT history_event_check;
ALTER TABLE history ADD CONSTRAINT history_event_check
    CHECK (event IN ('fillup', 'drain', 'reserved', 'committed', 'released', 'expired', 'denied', 'granted', 'revoked'));
