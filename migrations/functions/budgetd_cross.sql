-- The rule of threshold events (ledger.Cross), for the writes at p_now that
-- took the locked bucket p_key of limit p_l from use p_before to each use of
-- p_afters in turn (level + held at p_now after each write), p_start being
-- the start (µs) of the period that contains p_now (NULL for a limit that is
-- not periodic), given the marks the bucket kept (p_sig, p_above,
-- p_period). Marks kept for another list of thresholds are first recomputed
-- from p_before without events, marks of an earlier period clear without
-- events; then, write by write, every threshold that its use after reaches
-- (>=) and was not marked is crossed, every marked one it no longer reaches
-- is left. The events go into the outbox in the order of the writes, then of
-- the thresholds, each with the use after its write, and the bucket keeps
-- the new marks. A threshold's level is capacity × percentage × 0.01 ("80%";
-- exact, as numeric multiplication never rounds) or the amount ("4500").
-- Callers skip it for a limit without thresholds (budgetd_put_limit clears
-- the marks of its buckets when a limit loses its thresholds), and
-- budgetd_fillup_batch decides without it, writing the marks with the
-- bucket, when the writes emit nothing (budgetd_batch_write,
-- budgetd_batch_marks); a change to the rule changes those too.
CREATE OR REPLACE FUNCTION budgetd_cross(p_l limits, p_key text, p_sig integer, p_above integer, p_period bigint,
                                         p_before numeric, p_afters numeric[], p_now timestamptz, p_start bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_period bigint := coalesce(p_start, 0);
    v_above  integer := p_above;
    v_level  numeric;
    v_t      text;
    v_bit    integer;
    v_was    boolean;
    v_reach  boolean;
    v_after  numeric;
BEGIN
    IF p_sig <> p_l.th_sig THEN
        -- Marks of another list (or none): what p_before reaches, in
        -- whatever period they were kept.
        v_above := 0;
        FOR i IN 1 .. cardinality(p_l.thresholds) LOOP
            v_t := p_l.thresholds[i];
            v_level := CASE WHEN right(v_t, 1) = '%' THEN p_l.capacity * left(v_t, -1)::numeric * 0.01 ELSE v_t::numeric END;
            IF p_before >= v_level THEN
                v_above := v_above | (1 << (i - 1));
            END IF;
        END LOOP;
    ELSIF p_period <> v_period THEN
        v_above := 0;
    END IF;
    FOREACH v_after IN ARRAY p_afters LOOP
        FOR i IN 1 .. cardinality(p_l.thresholds) LOOP
            v_t := p_l.thresholds[i];
            v_level := CASE WHEN right(v_t, 1) = '%' THEN p_l.capacity * left(v_t, -1)::numeric * 0.01 ELSE v_t::numeric END;
            v_bit := 1 << (i - 1);
            v_reach := v_after >= v_level;
            v_was := v_above & v_bit <> 0;
            IF v_reach <> v_was THEN
                v_above := CASE WHEN v_reach THEN v_above | v_bit ELSE v_above & ~v_bit END;
                INSERT INTO events (at, limit_name, key, type, threshold, used, capacity, period_start)
                VALUES (p_now, p_l.name, p_key, CASE WHEN v_reach THEN 'threshold.crossed' ELSE 'threshold.recovered' END,
                        v_t, trim_scale(v_after), p_l.capacity, budgetd_from_us(p_start));
            END IF;
        END LOOP;
    END LOOP;
    IF p_sig <> p_l.th_sig OR p_period <> v_period OR p_above <> v_above THEN
        UPDATE buckets SET th_sig = p_l.th_sig, th_above = v_above, th_period = v_period
         WHERE limit_id = p_l.id AND key = p_key;
    END IF;
END $$;
