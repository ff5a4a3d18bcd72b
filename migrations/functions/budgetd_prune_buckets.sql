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
CREATE OR REPLACE FUNCTION budgetd_prune_buckets(p_after_limit bigint, p_after_key text, p_now timestamptz, p_batch int,
                                      OUT next_limit bigint, OUT next_key text, OUT deleted int,
                                      OUT ask_limits text[], OUT ask_keys text[])
LANGUAGE plpgsql AS $$
DECLARE
    v_r       record;
    v_scanned int := 0;
BEGIN
    deleted := 0;
    ask_limits := '{}';
    ask_keys := '{}';
    FOR v_r IN SELECT b.limit_id, b.key, b.level, b.updated_at, b.slot_idx, b.slot_sum, l.id AS lid, l.name, l.leak_amount, l.leak_per_us,
                      l.period_every IS NOT NULL AS periodic, budgetd_period_start(l, p_now, false) AS pstart,
                      l.window_length_us AS wlen, l.window_precision_us AS wprec,
                      coalesce(cardinality(l.override_lens) > 0, false) AS overrides,
                      CASE WHEN l.grant_rows > 0 THEN budgetd_grant_sum(l.id, b.key, p_now) > 0 ELSE false END AS granted,
                      coalesce(l.period_every IS NOT NULL AND l.rollover_max > 0, false) AS passes_on,
                      coalesce(l.override_rules AND l.override_expiry > b.updated_at, false) AS pending
                 FROM buckets b LEFT JOIN limits l ON l.id = b.limit_id
                WHERE (b.limit_id, b.key) > (p_after_limit, p_after_key COLLATE "C")
                ORDER BY b.limit_id, b.key
                LIMIT p_batch LOOP
        v_scanned := v_scanned + 1;
        next_limit := v_r.limit_id;
        next_key := v_r.key;
        IF v_r.lid IS NOT NULL AND (v_r.updated_at IS NULL OR (v_r.periodic AND v_r.pstart IS NULL) OR v_r.granted OR v_r.passes_on) THEN
            CONTINUE;
        END IF;
        IF v_r.lid IS NOT NULL AND NOT v_r.pending
           AND budgetd_level_at(v_r.level, v_r.updated_at, v_r.leak_amount, v_r.leak_per_us, p_now, v_r.pstart,
                                v_r.wlen, v_r.wprec, v_r.slot_idx, v_r.slot_sum) > 0 THEN
            CONTINUE;
        END IF;
        IF v_r.lid IS NOT NULL AND (v_r.pending OR v_r.overrides) THEN
            ask_limits := ask_limits || v_r.name;
            ask_keys := ask_keys || v_r.key;
            CONTINUE;
        END IF;
        IF budgetd_prune_bucket(v_r.limit_id, v_r.key, p_now) THEN
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
