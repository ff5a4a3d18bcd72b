CREATE OR REPLACE FUNCTION budgetd_limits_exist(p_ids bigint[]) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (SELECT 1 FROM unnest(p_ids) AS u(lid) WHERE NOT EXISTS (SELECT 1 FROM limits l WHERE l.id = u.lid))
$$;
