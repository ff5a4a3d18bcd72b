-- The instant us microseconds after the Unix epoch (budgetd_us's inverse).
-- STABLE, as timestamptz + interval is: declared IMMUTABLE, PostgreSQL would
-- not inline it and would parse and plan it again in every transaction.
CREATE OR REPLACE FUNCTION budgetd_from_us(us bigint) RETURNS timestamptz
LANGUAGE sql STABLE AS $$ SELECT timestamptz 'epoch' + (us::text || ' microseconds')::interval $$;
