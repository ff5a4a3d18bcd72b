-- The accept test of a fill-up or a reservation (bucket.Fillup, bucket.Reserve),
-- the one place it is written: a cost of 0 always fits, otherwise the settled
-- level, the active holds and the cost together must not pass the limit's
-- ceiling (budgetd_ceiling: the capacity, or more under a shadow or soft mode).
CREATE OR REPLACE FUNCTION budgetd_fits(p_level numeric, p_held numeric, p_cost numeric, p_ceiling numeric)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_cost = 0 OR p_level + p_held + p_cost <= p_ceiling
$$;
