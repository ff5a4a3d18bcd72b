-- The use of the bucket p_key of limit p_l at p_now, level + held as
-- decisions count them (ledger.UsedAt): the settled level and the active
-- holds that have not expired at p_now.
CREATE OR REPLACE FUNCTION budgetd_used(p_l limits, p_key text, p_now timestamptz) RETURNS numeric
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT budgetd_level_at(b.level, b.updated_at, p_l.leak_amount, p_l.leak_per_us, p_now,
                                             budgetd_period_start(p_l, p_now), p_l.window_length_us, p_l.window_precision_us,
                                             b.slot_idx, b.slot_sum)
                       FROM buckets b WHERE b.limit_id = p_l.id AND b.key = p_key), 0)
         + coalesce((SELECT sum(h.amount) FROM holds h
                      WHERE h.limit_id = p_l.id AND h.key = p_key AND h.state = 'active' AND h.expires_at > p_now), 0)
$$;
