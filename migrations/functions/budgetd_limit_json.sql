CREATE OR REPLACE FUNCTION budgetd_limit_json(l limits) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('name', l.name, 'capacity', l.capacity::text, 'leak_amount', l.leak_amount::text,
        'leak_per_us', l.leak_per_us, 'history', l.history,
        'created_us', budgetd_us(l.created_at), 'updated_us', budgetd_us(l.updated_at))
$$;
