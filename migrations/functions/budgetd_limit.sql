CREATE OR REPLACE FUNCTION budgetd_limit(p_name text) RETURNS limits
LANGUAGE plpgsql AS $$
DECLARE
    v_l limits;
BEGIN
    SELECT * INTO v_l FROM limits WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'limit "%" not found', p_name USING ERRCODE = budgetd_code_limit_not_found();
    END IF;
    RETURN v_l;
END $$;
