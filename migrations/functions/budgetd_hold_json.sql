CREATE OR REPLACE FUNCTION budgetd_hold_json(h holds, p_limit_name text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('id', h.id, 'limit', p_limit_name, 'key', h.key, 'amount', h.amount::text,
        'state', h.state, 'committed', h.committed_amount::text,
        'created_us', budgetd_us(h.created_at), 'expires_us', budgetd_us(h.expires_at),
        'resolved_us', budgetd_us(h.resolved_at))
$$;
