-- The threshold rule (budgetd_cross) without its call, for the accepted
-- items of one budgetd_fillup_batch on the bucket p_b (its marks th_sig,
-- th_above and th_period as stored; the NULL row for none) of the limit p_l
-- (its terms, with thresholds), whose uses (level + held) went from
-- p_before to each of p_afters in turn, p_start being the period's start
-- (NULL: not periodic), when the last use may reach a threshold (else
-- budgetd_batch_write sets the marks with one test). Returns the marks the
-- bucket's write sets, {th_sig, th_above, th_period}, when no event is
-- due, and NULL when one is: budgetd_cross then runs after the write. The
-- marks the rule starts from (the bucket's; for marks of another list of
-- thresholds, those that p_before reaches; none for marks of an earlier
-- period) are compared with the thresholds reached after the first item
-- and after the last: the uses only grow (each item adds a positive cost,
-- the holds stay) and reaching (>=) is monotone in the use, so when the
-- three agree every item in between reaches the same.
CREATE OR REPLACE FUNCTION budgetd_batch_marks(p_l limits, p_b buckets, p_before numeric, p_afters numeric[], p_start bigint)
RETURNS bigint[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_last  numeric := p_afters[cardinality(p_afters)];
    v_level numeric;
    v_above integer := 0;
    v_first integer := 0;
    v_lasts integer := 0;
BEGIN
    FOR i IN 1 .. cardinality(p_l.thresholds) LOOP
        v_level := CASE WHEN right(p_l.thresholds[i], 1) = '%' THEN p_l.capacity * left(p_l.thresholds[i], -1)::numeric * 0.01
                        ELSE p_l.thresholds[i]::numeric END;
        IF p_before >= v_level THEN
            v_above := v_above | (1 << (i - 1));
        END IF;
        IF p_afters[1] >= v_level THEN
            v_first := v_first | (1 << (i - 1));
        END IF;
        IF v_last >= v_level THEN
            v_lasts := v_lasts | (1 << (i - 1));
        END IF;
    END LOOP;
    IF coalesce(p_b.th_sig, 0) <> p_l.th_sig THEN
        NULL;  -- marks of another list (or none): what p_before reaches
    ELSIF coalesce(p_b.th_period, 0) <> coalesce(p_start, 0) THEN
        v_above := 0;
    ELSE
        v_above := coalesce(p_b.th_above, 0);
    END IF;
    IF v_first = v_above AND v_lasts = v_above THEN
        RETURN ARRAY[p_l.th_sig, v_above, coalesce(p_start, 0)];
    END IF;
    RETURN NULL;
END $$;
