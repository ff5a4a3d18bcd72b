-- (Versions 2 to 5 were released files of functions, which now live in
-- functions/; databases that applied them keep their records.)
-- meta: what the caller said of an event (SPEC "Seeing the spend"): a JSON
-- object of up to 16 string values, NULL when nothing was said.
ALTER TABLE history ADD COLUMN meta jsonb;
