-- Microseconds since the Unix epoch (NULL stays NULL).
CREATE OR REPLACE FUNCTION budgetd_us(t timestamptz) RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;
