-- The level of a window bucket at p_now (package bucket, windowLevel): the
-- sum of its slots p_idx, p_sum (µs slot numbers of p_prec each, oldest
-- first) whose charges still count at the later of p_now and p_updated (a
-- clock that went back ages nothing out). Slot i counts while that instant
-- is before (i+1) × p_prec + p_len. A bucket without slots and a positive
-- level (settled under another rule by a PUT) reads as one charge made at
-- p_updated. Exact numeric sums. In PL/pgSQL, which keeps the sum's plan for
-- the session: a SQL function with a subquery is never inlined and is parsed
-- and planned again in every transaction.
CREATE OR REPLACE FUNCTION budgetd_window_level(p_level numeric, p_updated timestamptz, p_len bigint, p_prec bigint,
                                                p_idx bigint[], p_sum numeric[], p_now timestamptz)
RETURNS numeric LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF coalesce(cardinality(p_idx), 0) = 0 THEN
        RETURN CASE WHEN p_level > 0 AND p_updated IS NOT NULL
                         AND (budgetd_us(p_updated) / p_prec + 1) * p_prec + p_len > greatest(budgetd_us(p_now), budgetd_us(p_updated))
                    THEN p_level ELSE 0 END;
    END IF;
    RETURN (SELECT coalesce(sum(u.s), 0) FROM unnest(p_idx, p_sum) AS u(i, s)
             WHERE (u.i + 1) * p_prec + p_len > greatest(budgetd_us(p_now), coalesce(budgetd_us(p_updated), 0)));
END $$;
