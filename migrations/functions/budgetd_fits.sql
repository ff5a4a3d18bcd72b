-- The accept test of a fill-up or a reservation (bucket.Fillup, bucket.Reserve),
-- the one place it is written: a cost of 0 always fits, otherwise the settled
-- level, the active holds and the cost together must not pass the capacity.
CREATE OR REPLACE FUNCTION budgetd_fits(p_level numeric, p_held numeric, p_cost numeric, p_capacity numeric)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_cost = 0 OR p_level + p_held + p_cost <= p_capacity
$$;
