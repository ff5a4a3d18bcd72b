-- The outcome document of one single-bucket Fillup, as budgetd_fillup
-- answers it and stores it for its Idempotency-Key: accepted (p_fits), the
-- instant (p_now_us) and one item with the limit (p_limit, its
-- budgetd_limit_json) and the bucket's state (level text, updated µs, the
-- active holds as two arrays in order, then the window's slots, p_slots:
-- budgetd_slots_json). Its entry_id is null: the caller sets it once the
-- history entry is written.
CREATE OR REPLACE FUNCTION budgetd_idem_doc(p_fits boolean, p_now_us bigint, p_limit jsonb, p_level text, p_updated_us bigint,
                                            p_amounts text[], p_expires bigint[], p_slots jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN jsonb_build_object('accepted', p_fits, 'now_us', p_now_us,
        'items', jsonb_build_array(jsonb_build_object('fits', p_fits, 'limit', p_limit,
            'state', jsonb_build_object('level', p_level, 'updated_us', p_updated_us,
                'holds', (SELECT coalesce(jsonb_agg(jsonb_build_object('amount', u.a, 'expires_us', u.e) ORDER BY u.o), '[]'::jsonb)
                            FROM unnest(p_amounts, p_expires) WITH ORDINALITY AS u(a, e, o))) || p_slots,
            'entry_id', NULL)));
END $$;
