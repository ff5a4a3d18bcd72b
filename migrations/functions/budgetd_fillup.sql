-- budgetd_fillup(limits[], keys[], costs[], now, scopes[], idems[], hashes[],
-- all_or_none, metas[]): every Fillup, the one entry point the store calls.
-- metas[i] is item i's meta as JSON text (NULL or '' for none), and
-- terms[i] the terms budgetd resolved for item i's bucket (a
-- budgetd_terms_arg as text, migration 0021; the same for every item of a
-- bucket).
--
-- With all_or_none the items are one multi-bucket call (bucket.Fillup per
-- item, every item or none), with one Idempotency-Key (scopes[1], idems[1],
-- hashes[1]); the buckets are locked in (limit_id, key) order. Its answer is
-- one row whose doc holds the call's outcome document, the one stored for
-- its Idempotency-Key; its errors fail the statement.
--
-- Otherwise every item is a single-bucket call of its own, with its own key:
-- the calls a caller sent alone or that the store coalesced (coalesce.go).
-- The calls of each bucket go, in the order given, to one
-- budgetd_fillup_batch call; the buckets are taken in (limit_id, key) order,
-- the lock order of every call, so that calls locking several buckets do not
-- deadlock one another. One row per item, item its position in the arguments.
CREATE OR REPLACE FUNCTION budgetd_fillup(p_limits text[], p_keys text[], p_costs text[], p_now timestamptz,
                                          p_scopes text[], p_idems text[], p_hashes text[], p_all_or_none boolean,
                                          p_metas text[] DEFAULT NULL, p_terms text[] DEFAULT NULL)
RETURNS TABLE (r_item int, r_fits boolean, r_level text, r_updated_us bigint, r_hold_amounts text[], r_hold_expires bigint[],
               r_now_us bigint, r_capacity text, r_leak_amount text, r_leak_per_us bigint, r_period jsonb, r_history boolean,
               r_created_us bigint, r_limit_updated_us bigint, r_doc jsonb, r_err_code text, r_err_msg text,
               r_window_length_us bigint, r_window_precision_us bigint, r_slot_idx bigint[], r_slot_sums text[],
               r_record_denials boolean, r_entry_id text, r_mode text, r_grace text, r_thresholds text[], r_override text,
               r_grants text, r_rollover text)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_all_or_none THEN
        r_item := 1;
        r_doc := budgetd_fillup_all(p_limits, p_keys, p_costs, p_now, p_scopes[1], p_idems[1], p_hashes[1], p_metas, p_terms);
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_limits[1] = ALL (p_limits) AND p_keys[1] = ALL (p_keys) THEN
        -- One bucket: straight to its batch.
        RETURN QUERY
            SELECT b.ordinality::int, b.r_fits, b.r_level, b.r_updated_us, b.r_hold_amounts, b.r_hold_expires,
                   b.r_now_us, b.r_capacity, b.r_leak_amount, b.r_leak_per_us, b.r_period, b.r_history,
                   b.r_created_us, b.r_limit_updated_us, b.r_doc, b.r_err_code, b.r_err_msg,
                   b.r_window_length_us, b.r_window_precision_us, b.r_slot_idx, b.r_slot_sums, b.r_record_denials, b.r_entry_id,
                   b.r_mode, b.r_grace, b.r_thresholds, b.r_override, b.r_grants, b.r_rollover
              FROM budgetd_fillup_batch(p_limits[1], p_keys[1], p_costs, p_now, p_scopes, p_idems, p_hashes, p_metas,
                                        p_t => p_terms[1]::budgetd_terms_arg) WITH ORDINALITY AS b;
        RETURN;
    END IF;
    -- One statement for all the buckets: it groups the items by bucket, with
    -- each group's arguments, reads each limit's row for all of its buckets
    -- (budgetd_fillup_batch then locks only the bucket; it reads the limit
    -- itself when it is not found, to answer as alone), and calls
    -- budgetd_fillup_batch per bucket in lock order: the sorted, materialized
    -- groups are the outer side of the nested loop that calls it, and a CTE
    -- scan returns its rows in the order they were stored.
    RETURN QUERY
        WITH g AS MATERIALIZED (
            SELECT li AS lim, q.l, q.k, q.items, q.costs, q.scopes, q.idems, q.hashes, q.metas, q.terms
              FROM (SELECT u.l, u.k, array_agg(u.o::int ORDER BY u.o) AS items,
                           array_agg(p_costs[u.o] ORDER BY u.o) AS costs, array_agg(p_scopes[u.o] ORDER BY u.o) AS scopes,
                           array_agg(p_idems[u.o] ORDER BY u.o) AS idems, array_agg(p_hashes[u.o] ORDER BY u.o) AS hashes,
                           array_agg(p_metas[u.o] ORDER BY u.o) AS metas, min(p_terms[u.o]) AS terms
                      FROM unnest(p_limits, p_keys) WITH ORDINALITY AS u(l, k, o)
                     GROUP BY u.l, u.k) q
              LEFT JOIN limits li ON li.name = q.l
             ORDER BY li.id, q.k COLLATE "C", q.l COLLATE "C")
        SELECT g.items[b.ordinality::int], b.r_fits, b.r_level, b.r_updated_us, b.r_hold_amounts, b.r_hold_expires,
               b.r_now_us, b.r_capacity, b.r_leak_amount, b.r_leak_per_us, b.r_period, b.r_history,
               b.r_created_us, b.r_limit_updated_us, b.r_doc, b.r_err_code, b.r_err_msg,
               b.r_window_length_us, b.r_window_precision_us, b.r_slot_idx, b.r_slot_sums, b.r_record_denials, b.r_entry_id,
               b.r_mode, b.r_grace, b.r_thresholds, b.r_override, b.r_grants, b.r_rollover
          FROM g CROSS JOIN LATERAL budgetd_fillup_batch(g.l, g.k, g.costs, p_now, g.scopes, g.idems, g.hashes, g.metas, g.lim,
                                                          g.terms::budgetd_terms_arg)
               WITH ORDINALITY AS b;
END $$;
