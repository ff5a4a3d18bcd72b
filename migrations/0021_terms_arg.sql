-- The terms of one bucket's decision as budgetd resolves them in Go (issue
-- 42; docs/postgres.md "Terms"): internal/postgres keeps each limit and an
-- index of its overrides in process, resolves the override that applies to
-- a key (ledger.TermsAt, ledger.SpanAt) and passes the result to
-- budgetd_fillup, one per item. The function checks, under the bucket's
-- lock, that they were resolved from the limit as it is stored (limit_id,
-- revision_us: its updated_at, override_ver: its override_ver, 0 for NULL)
-- and for the database's now (from_us <= now < until_us; NULL: unbounded),
-- and answers BD009 (stale_terms) otherwise: budgetd reloads the limit and
-- retries. A bucket last written before switch_us (the last instant at or
-- before from_us at which an override's expiry changed the key's rule)
-- is to be settled first: BD010 (settle), and budgetd settles it in Go
-- (ledger.TermsAt under the row's lock) and retries.
-- The override's terms are deltas: NULL is the limit's own. period_tz or
-- period_start_day set means the override changes the period, whose table of
-- period starts is the override's row's. prev_capacity, for a limit with
-- rollover, is the capacity in force at the end of the period before.
CREATE TYPE budgetd_terms_arg AS (
    limit_id            bigint,
    revision_us         bigint,
    override_ver        bigint,
    from_us             bigint,
    until_us            bigint,
    switch_us           bigint,
    override            text,
    capacity            numeric,
    leak_amount         numeric,
    leak_per_us         bigint,
    period_tz           text,
    period_start_day    int,
    window_length_us    bigint,
    window_precision_us bigint,
    prev_capacity       numeric
);

-- The override a bucket's last decision applied (0019_override_memo.sql)
-- is no longer kept: the index in Go resolves it at no cost to the
-- database. limits.override_ver stays: it is the version checked.
ALTER TABLE buckets DROP COLUMN ov_ver, DROP COLUMN ov_pattern, DROP COLUMN ov_capacity;
