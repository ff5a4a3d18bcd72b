-- A hold as stored, with the clock; writes nothing.
CREATE OR REPLACE FUNCTION budgetd_reservation(p_id text, p_now timestamptz) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_h    holds;
    v_name text;
BEGIN
    SELECT * INTO v_h FROM holds WHERE id = p_id;
    IF FOUND THEN
        SELECT name INTO v_name FROM limits WHERE id = v_h.limit_id;
    END IF;
    IF v_name IS NULL THEN
        RAISE EXCEPTION 'reservation "%" not found', p_id USING ERRCODE = budgetd_code_reservation_not_found();
    END IF;
    RETURN jsonb_build_object('reservation', budgetd_hold_json(v_h, v_name),
                              'now_us', budgetd_us(coalesce(p_now, budgetd_clock())));
END $$;
