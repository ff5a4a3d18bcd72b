-- Overrides: a limit's terms for one key or a key prefix (SPEC "Terms per
-- customer", docs/terms.md). pattern is the key, or the prefix followed by
-- "*"; plen is the prefix's length in characters for a prefix pattern and
-- NULL for an exact one. A NULL term comes from the limit. period_starts is
-- the table of period starts (as limits.period_starts) of the limit's period
-- with the override's tz and start_day, computed by budgetd for the period
-- that period_key names ("every tz start_day"): when the limit's period
-- changes, budgetd_with_override sees another key and asks for a new table.
-- A deleted limit's overrides go with its other rows (budgetd_prune_deleted).
CREATE TABLE overrides (
    limit_id            bigint NOT NULL,
    pattern             text COLLATE "C" NOT NULL,
    plen                int,
    capacity            numeric CHECK (capacity > 0 AND capacity <= 1000000000000),
    leak_amount         numeric CHECK (leak_amount > 0 AND leak_amount <= 1000000000000),
    leak_per_us         bigint CHECK (leak_per_us > 0),
    period_tz           text,
    period_start_day    int,
    period_starts       bigint[],
    period_key          text,
    window_length_us    bigint,
    window_precision_us bigint,
    expires_at          timestamptz,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    PRIMARY KEY (limit_id, pattern),
    CHECK ((plen IS NULL) = (right(pattern, 1) <> '*'))
);
CREATE INDEX overrides_plen ON overrides (limit_id, plen);

-- limits.override_lens lists the distinct plen of the limit's overrides (-1
-- standing for exact ones), longest first: a decision looks up only the
-- patterns of those lengths, one index probe each, and a limit without
-- overrides none. limits.override is NULL in every stored row: a limit
-- value with an override applied (budgetd_with_override) names its pattern
-- there.
ALTER TABLE limits ADD COLUMN override_lens int[] NOT NULL DEFAULT '{}';
ALTER TABLE limits ADD COLUMN override text;
