-- The slots a write leaves in a window bucket (package bucket: settledSlots,
-- then chargeSlot or drainSlots), from the stored row (p_level, p_updated,
-- p_idx, p_sum) at p_now: the slots that still count at the later of p_now
-- and p_updated, none of zero sum (a bucket without slots and a positive
-- level reads as one charge made at p_updated); then p_charge added to the
-- slot of that instant, merged into the newest slot when it is that one or
-- newer (a clock that went back charges the newest slot); or p_drain taken
-- from the newest slots first. Exact numeric arithmetic. At most
-- length/precision + 1 slots are left: every one kept counts at that instant,
-- and a new one is the newest. No slots is NULL, NULL. For a limit that is
-- not a window (p_len NULL) both are NULL.
CREATE OR REPLACE FUNCTION budgetd_window_slots(p_level numeric, p_updated timestamptz, p_len bigint, p_prec bigint,
                                                p_idx bigint[], p_sum numeric[], p_now timestamptz,
                                                p_charge numeric, p_drain numeric,
                                                OUT o_idx bigint[], OUT o_sum numeric[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_at   bigint;
    v_n    int;
    v_i    bigint;
    v_left numeric := coalesce(p_drain, 0);
    v_take numeric;
BEGIN
    IF p_len IS NULL THEN
        RETURN;
    END IF;
    v_at := greatest(budgetd_us(p_now), coalesce(budgetd_us(p_updated), 0));
    IF coalesce(cardinality(p_idx), 0) = 0 THEN
        IF p_level > 0 AND p_updated IS NOT NULL THEN
            p_idx := ARRAY[budgetd_us(p_updated) / p_prec];
            p_sum := ARRAY[p_level];
        ELSE
            p_idx := '{}';
            p_sum := '{}';
        END IF;
    END IF;
    SELECT coalesce(array_agg(u.i ORDER BY u.o), '{}'), coalesce(array_agg(u.s ORDER BY u.o), '{}')
      INTO o_idx, o_sum
      FROM unnest(p_idx, p_sum) WITH ORDINALITY AS u(i, s, o)
     WHERE (u.i + 1) * p_prec + p_len > v_at AND u.s > 0;
    v_n := cardinality(o_idx);
    IF p_charge > 0 THEN
        v_i := v_at / p_prec;
        IF v_n > 0 AND o_idx[v_n] >= v_i THEN
            o_sum[v_n] := trim_scale(o_sum[v_n] + p_charge);
        ELSE
            o_idx := o_idx || v_i;
            o_sum := o_sum || trim_scale(p_charge);
            v_n := v_n + 1;
        END IF;
    END IF;
    IF v_left > 0 THEN
        -- A refund undoes the most recent spend: newest slots first.
        FOR k IN REVERSE v_n .. 1 LOOP
            EXIT WHEN v_left <= 0;
            v_take := least(v_left, o_sum[k]);
            o_sum[k] := trim_scale(o_sum[k] - v_take);
            v_left := v_left - v_take;
        END LOOP;
        SELECT coalesce(array_agg(u.i ORDER BY u.o), '{}'), coalesce(array_agg(u.s ORDER BY u.o), '{}')
          INTO o_idx, o_sum
          FROM unnest(o_idx, o_sum) WITH ORDINALITY AS u(i, s, o)
         WHERE u.s > 0;
        v_n := cardinality(o_idx);
    END IF;
    IF v_n = 0 THEN
        o_idx := NULL;
        o_sum := NULL;
    END IF;
END $$;
