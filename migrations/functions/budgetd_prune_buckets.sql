-- Scans up to p_batch buckets after the cursor (p_after_limit, p_after_key) and
-- deletes those that are empty at p_now with no active hold, no history left
-- and no reached threshold of the current period, or whose limit is gone.
-- Returns the cursor to continue from (NULL once the scan reached the end)
-- and how many it deleted.
CREATE OR REPLACE FUNCTION budgetd_prune_buckets(p_after_limit bigint, p_after_key text, p_now timestamptz, p_batch int,
                                      OUT next_limit bigint, OUT next_key text, OUT deleted int)
LANGUAGE plpgsql AS $$
DECLARE
    v_r       record;
    v_scanned int := 0;
    v_n       int;
    v_l       limits;
BEGIN
    deleted := 0;
    -- A periodic limit whose table does not reach now (pstart NULL) keeps its
    -- buckets until a call refreshes the table. A bucket that an override
    -- applies to is kept while it does (its own terms decide when it is
    -- empty; docs/terms.md), and so is one with an active grant, and a
-- written one of a limit with rollover above zero: it may still pass
-- rollover on (ledger.Limit.PassesOn). A bucket that may have crossed the
-- expiry of an override that changed its rule (limits.override_rules and
-- override_expiry) is settled there first, under its lock
-- (budgetd_settle_expiries), and judged on that state: under the limit's
-- rule alone a slower leak that ended would look emptied too early.
    FOR v_r IN SELECT b.limit_id, b.key, b.level, b.updated_at, b.slot_idx, b.slot_sum, l.id AS lid, l.leak_amount, l.leak_per_us,
                      l.period_every IS NOT NULL AS periodic, budgetd_period_start(l, p_now, false) AS pstart,
                      l.window_length_us AS wlen, l.window_precision_us AS wprec,
                      coalesce(cardinality(l.override_lens) > 0
                               AND (budgetd_override(l, b.key, p_now)).limit_id IS NOT NULL, false) AS overridden,
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
        IF v_r.lid IS NOT NULL AND ((NOT v_r.pending
                                     AND budgetd_level_at(v_r.level, v_r.updated_at, v_r.leak_amount, v_r.leak_per_us, p_now, v_r.pstart,
                                                          v_r.wlen, v_r.wprec, v_r.slot_idx, v_r.slot_sum) > 0)
            OR v_r.updated_at IS NULL OR (v_r.periodic AND v_r.pstart IS NULL) OR v_r.overridden OR v_r.granted OR v_r.passes_on) THEN
            CONTINUE;
        END IF;
        PERFORM 1 FROM buckets WHERE limit_id = v_r.limit_id AND key = v_r.key FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        IF v_r.lid IS NOT NULL AND v_r.pending THEN
            SELECT * INTO v_l FROM limits WHERE id = v_r.lid;
            PERFORM budgetd_settle_expiries(v_l, v_r.key, p_now);
        END IF;
        -- Check again on the latest version, under the lock.
        DELETE FROM buckets b
         WHERE b.limit_id = v_r.limit_id AND b.key = v_r.key
           AND (NOT EXISTS (SELECT 1 FROM limits l WHERE l.id = b.limit_id)
                OR (b.updated_at IS NOT NULL
                    AND budgetd_level_at(b.level, b.updated_at, v_r.leak_amount, v_r.leak_per_us, p_now, v_r.pstart,
                                         v_r.wlen, v_r.wprec, b.slot_idx, b.slot_sum) = 0
                    AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.limit_id = b.limit_id AND h.key = b.key AND h.state = 'active')
                    AND NOT EXISTS (SELECT 1 FROM grants g WHERE g.limit_id = b.limit_id AND g.key = b.key AND g.expires_at > p_now)
                    -- A reached threshold of the current period (any, when not
                    -- periodic): the next write must see it to emit the recovery.
                    AND (b.th_above = 0 OR (v_r.pstart IS NOT NULL AND b.th_period <> v_r.pstart))
                    AND NOT EXISTS (SELECT 1 FROM history e WHERE e.limit_id = b.limit_id AND e.key = b.key)));
        GET DIAGNOSTICS v_n = ROW_COUNT;
        deleted := deleted + v_n;
    END LOOP;
    IF v_scanned < p_batch THEN
        next_limit := NULL;
        next_key := NULL;
    END IF;
END $$;
