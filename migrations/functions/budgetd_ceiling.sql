-- The most level + held may reach by an accepted charge on limit l
-- (ledger.Limit.Ceiling): the capacity under 'enforce', capacity × (1 +
-- grace/100) under 'soft' (exact: numeric multiplication does not round, and
-- grace has at most 2 decimals), and budgetd_max_level(), the largest level a
-- bucket keeps, under 'shadow'. The accept test (budgetd_fits) takes it in
-- place of the capacity everywhere a cost is admitted, budgetd_fillup_batch
-- included.
CREATE OR REPLACE FUNCTION budgetd_ceiling(l limits) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE l.mode WHEN 'shadow' THEN budgetd_max_level()
                       WHEN 'soft' THEN trim_scale(l.capacity + l.capacity * l.grace * 0.01)
                       ELSE l.capacity END
$$;
