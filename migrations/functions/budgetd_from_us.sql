CREATE OR REPLACE FUNCTION budgetd_from_us(us bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$ SELECT timestamptz 'epoch' + (us::text || ' microseconds')::interval $$;
