-- The active holds of the bucket p_key of the limit p_id at p_now, as a
-- decision reads them: the sum of those that count (expires_at after
-- p_now), how many have expired, and the answer's lists (amounts as text,
-- expiries in µs, by expiry then id) with and without the expired ones.
CREATE OR REPLACE FUNCTION budgetd_holds_at(p_id bigint, p_key text, p_now timestamptz)
RETURNS TABLE (held numeric, expired bigint, all_a text[], all_e bigint[], live_a text[], live_e bigint[])
LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(h.amount) FILTER (WHERE h.expires_at > p_now), 0),
           count(*) FILTER (WHERE h.expires_at <= p_now),
           coalesce(array_agg(h.amount::text ORDER BY h.expires_at, h.id), '{}'),
           coalesce(array_agg(budgetd_us(h.expires_at) ORDER BY h.expires_at, h.id), '{}'),
           coalesce(array_agg(h.amount::text ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > p_now), '{}'),
           coalesce(array_agg(budgetd_us(h.expires_at) ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > p_now), '{}')
      FROM holds h
     WHERE h.limit_id = p_id AND h.key = p_key AND h.state = 'active'
$$;
