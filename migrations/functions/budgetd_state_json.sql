-- A bucket as the rule sees it: level, updated, the holds not yet recorded
-- as resolved or expired (the rule ignores those past expires_at) and, for a
-- window bucket with slots only, "slot_idx" and "slot_sums" (the slots as
-- stored, oldest first, sums as text). One statement, so that a reader
-- without locks (Inspect) sees the row and its holds in one snapshot. In
-- PL/pgSQL, which keeps the statement's plan for the session: a SQL function
-- with a FROM is never inlined and is parsed and planned in every transaction.
CREATE OR REPLACE FUNCTION budgetd_state_json(p_limit_id bigint, p_key text) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT jsonb_build_object(
        'level', coalesce(b.level, 0)::text,
        'updated_us', budgetd_us(b.updated_at),
        'holds', (SELECT coalesce(jsonb_agg(jsonb_build_object('amount', h.amount::text, 'expires_us', budgetd_us(h.expires_at))
                                           ORDER BY h.expires_at, h.id), '[]'::jsonb)
                    FROM holds h
                   WHERE h.limit_id = p_limit_id AND h.key = p_key AND h.state = 'active'))
        || budgetd_slots_json(b.slot_idx, b.slot_sum)
      FROM (SELECT 1) AS one
      LEFT JOIN buckets b ON b.limit_id = p_limit_id AND b.key = p_key);
END $$;
