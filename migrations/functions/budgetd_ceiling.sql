-- The most level + held may reach by an accepted charge on limit l under
-- its terms (ledger.Limit.Ceiling): l's capacity (grants and rollover
-- received included) × p_scale, how the mode scales it as budgetd resolved
-- it in Go (budgetd_terms_arg.ceiling_scale, ledger.Limit.CeilingScale;
-- exact: numeric multiplication does not round), or budgetd_max_level(),
-- the largest level a bucket keeps, for NULL (shadow). The accept test
-- (budgetd_fits) takes it in place of the capacity everywhere a cost is
-- admitted.
CREATE OR REPLACE FUNCTION budgetd_ceiling(l limits, p_scale numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_scale IS NULL THEN budgetd_max_level() ELSE trim_scale(l.capacity * p_scale) END
$$;
