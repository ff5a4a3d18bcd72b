-- Scans up to p_batch buckets after the cursor (p_after_limit, p_after_key) and
-- deletes those that are empty at p_now with no active hold, no history left
-- and no reached threshold of the current period, or whose limit is gone.
-- Returns the cursor to continue from (NULL once the scan reached the end),
-- how many it deleted, and the buckets it left to budgetd to judge (their
-- limits' names and keys): those of a limit with overrides that look empty
-- under the limit's own rule, and those that may have crossed the expiry of
-- an override that changed their rule (limits.override_rules and
-- override_expiry). Terms are resolved in Go (docs/postgres.md "Terms
-- resolved in Go"): budgetd settles the latter, keeps a bucket an override
-- applies to (its own terms decide when it is empty; docs/terms.md), and
-- deletes the others with budgetd_prune_bucket.
-- A periodic limit whose table does not reach now (pstart NULL) keeps its
-- buckets until a call refreshes the table; so does a bucket with an active
-- grant, and a written one of a limit with rollover above zero: it may still
-- pass rollover on (ledger.Limit.PassesOn).
-- The batch is judged in one statement, each limit's period start computed
-- once for all its buckets (not once a bucket), and only the buckets that
-- look empty go on to budgetd_prune_bucket, which decides again under the
-- bucket's lock (docs/postgres.md "The idle-bucket sweep").
CREATE OR REPLACE FUNCTION budgetd_prune_buckets(p_after_limit bigint, p_after_key text, p_now timestamptz, p_batch int,
                                      OUT next_limit bigint, OUT next_key text, OUT deleted int,
                                      OUT ask_limits text[], OUT ask_keys text[])
LANGUAGE plpgsql AS $$
DECLARE
    v_scanned int;
    v_del_ids bigint[];
    v_del_keys text[];
BEGIN
    WITH s AS MATERIALIZED (
             SELECT b.limit_id, b.key, b.level, b.updated_at, b.slot_idx, b.slot_sum
               FROM buckets b
              WHERE (b.limit_id, b.key) > (p_after_limit, p_after_key COLLATE "C")
              ORDER BY b.limit_id, b.key
              LIMIT p_batch),
         l AS MATERIALIZED (
             SELECT l.id, l.name, l.leak_amount, l.leak_per_us, l.grant_rows,
                    l.period_every IS NOT NULL AS periodic, budgetd_period_start(l, p_now, false) AS pstart,
                    l.window_length_us AS wlen, l.window_precision_us AS wprec,
                    coalesce(cardinality(l.override_lens) > 0, false) AS overrides,
                    coalesce(l.period_every IS NOT NULL AND l.rollover_max > 0, false) AS passes_on,
                    l.override_rules, l.override_expiry
               FROM limits l
              WHERE l.id IN (SELECT DISTINCT s.limit_id FROM s)),
         c AS MATERIALIZED (
             SELECT s.limit_id, s.key, l.name,
                    CASE
                        WHEN l.id IS NULL THEN 'delete'
                        WHEN s.updated_at IS NULL OR (l.periodic AND l.pstart IS NULL) OR l.passes_on
                             OR (l.grant_rows > 0 AND budgetd_grant_sum(l.id, s.key, p_now) > 0) THEN 'keep'
                        -- pending: it may have crossed the end of an override that changed its rule.
                        WHEN coalesce(l.override_rules AND l.override_expiry > s.updated_at, false) THEN 'ask'
                        WHEN budgetd_level_at(s.level, s.updated_at, l.leak_amount, l.leak_per_us, p_now, l.pstart,
                                              l.wlen, l.wprec, s.slot_idx, s.slot_sum) > 0 THEN 'keep'
                        WHEN l.overrides THEN 'ask'
                        ELSE 'delete'
                    END AS verdict
               FROM s LEFT JOIN l ON l.id = s.limit_id)
    SELECT count(*),
           (SELECT c.limit_id FROM c ORDER BY c.limit_id DESC, c.key DESC LIMIT 1),
           (SELECT c.key FROM c ORDER BY c.limit_id DESC, c.key DESC LIMIT 1),
           coalesce(array_agg(c.name ORDER BY c.limit_id, c.key) FILTER (WHERE c.verdict = 'ask'), '{}'),
           coalesce(array_agg(c.key ORDER BY c.limit_id, c.key) FILTER (WHERE c.verdict = 'ask'), '{}'),
           coalesce(array_agg(c.limit_id ORDER BY c.limit_id, c.key) FILTER (WHERE c.verdict = 'delete'), '{}'),
           coalesce(array_agg(c.key ORDER BY c.limit_id, c.key) FILTER (WHERE c.verdict = 'delete'), '{}')
      INTO v_scanned, next_limit, next_key, ask_limits, ask_keys, v_del_ids, v_del_keys
      FROM c;
    deleted := 0;
    FOR i IN 1 .. cardinality(v_del_ids) LOOP
        IF budgetd_prune_bucket(v_del_ids[i], v_del_keys[i], p_now) THEN
            deleted := deleted + 1;
        END IF;
    END LOOP;
    IF v_scanned < p_batch THEN
        next_limit := NULL;
        next_key := NULL;
    END IF;
END $$;

-- Deletes the bucket p_key of the limit p_limit_id when, under its lock
-- (taken with SKIP LOCKED: a bucket in use is kept), its limit is gone, or
-- it is empty at p_now under the limit's rule with no active hold, no active
-- grant, no history left and no reached threshold of the current period.
-- With p_rev and p_over (the limit's version budgetd judged the bucket's
-- terms at), a limit of another version keeps it. Reports whether it
-- deleted the bucket.
CREATE OR REPLACE FUNCTION budgetd_prune_bucket(p_limit_id bigint, p_key text, p_now timestamptz,
                                                p_rev bigint DEFAULT NULL, p_over bigint DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_l      limits;
    v_pstart bigint;
    v_n      int;
BEGIN
    PERFORM 1 FROM buckets WHERE limit_id = p_limit_id AND key = p_key FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- The limit as it is now, unlocked: a change of it after this read can
    -- only refill a bucket by a call, which waits for this lock.
    SELECT * INTO v_l FROM limits WHERE id = p_limit_id;
    IF FOUND AND p_rev IS NOT NULL
       AND (budgetd_us(v_l.updated_at) <> p_rev OR coalesce(v_l.override_ver, 0) <> p_over) THEN
        RETURN false;
    END IF;
    IF FOUND THEN
        v_pstart := budgetd_period_start(v_l, p_now, false);
        IF v_l.period_every IS NOT NULL AND v_pstart IS NULL THEN
            RETURN false;
        END IF;
    END IF;
    DELETE FROM buckets b
     WHERE b.limit_id = p_limit_id AND b.key = p_key
       AND (v_l.id IS NULL
            OR (b.updated_at IS NOT NULL
                AND budgetd_level_at(b.level, b.updated_at, v_l.leak_amount, v_l.leak_per_us, p_now, v_pstart,
                                     v_l.window_length_us, v_l.window_precision_us, b.slot_idx, b.slot_sum) = 0
                AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.limit_id = b.limit_id AND h.key = b.key AND h.state = 'active')
                AND NOT EXISTS (SELECT 1 FROM grants g WHERE g.limit_id = b.limit_id AND g.key = b.key AND g.expires_at > p_now)
                -- A reached threshold of the current period (any, when not
                -- periodic): the next write must see it to emit the recovery.
                AND (b.th_above = 0 OR (v_pstart IS NOT NULL AND b.th_period <> v_pstart))
                AND NOT EXISTS (SELECT 1 FROM history e WHERE e.limit_id = b.limit_id AND e.key = b.key)));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n > 0;
END $$;
