-- The database clock, in whole microseconds.
CREATE OR REPLACE FUNCTION budgetd_clock() RETURNS timestamptz
LANGUAGE sql VOLATILE AS $$ SELECT date_trunc('microseconds', clock_timestamp()) $$;
