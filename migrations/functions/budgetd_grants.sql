-- Grants (migration 0016, docs/terms.md): a bucket's top-ups of capacity.

-- The sum of the grants of the bucket p_key of the limit p_id active at
-- p_now (expires_at after it): one range scan of the primary key.
CREATE OR REPLACE FUNCTION budgetd_grant_sum(p_id bigint, p_key text, p_now timestamptz) RETURNS numeric
LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(g.amount), 0) FROM grants g
     WHERE g.limit_id = p_id AND g.key = p_key AND g.expires_at > p_now
$$;

-- p_l, a bucket's limit (its override applied), with p_sum, its active
-- grants, added to its capacity and kept in grant_sum
-- (ledger.Limit.WithGrants); with none, p_l as it is.
CREATE OR REPLACE FUNCTION budgetd_with_grants(p_l limits, p_sum numeric) RETURNS limits
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_sum IS NULL OR p_sum <= 0 THEN
        RETURN p_l;
    END IF;
    p_l.grant_sum := p_sum;
    p_l.capacity := p_l.capacity + p_sum;
    RETURN p_l;
END $$;

-- A grant as the store answers it: "g" and its id, the amount as text and
-- its times in µs.
CREATE OR REPLACE FUNCTION budgetd_grant_json(g grants) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('id', 'g' || g.id, 'amount', g.amount::text,
                              'created_us', budgetd_us(g.created_at), 'expires_us', budgetd_us(g.expires_at))
$$;

-- The limit p_name's row, locked until the transaction ends against a PUT
-- or DELETE of the limit and the other grants of the limit (its grant_rows
-- changes), not against decisions, which lock no limit row.
CREATE OR REPLACE FUNCTION budgetd_lock_limit(p_name text) RETURNS limits
LANGUAGE plpgsql AS $$
DECLARE
    v_l limits;
BEGIN
    SELECT * INTO v_l FROM limits WHERE name = p_name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'limit "%" not found', p_name USING ERRCODE = budgetd_code_limit_not_found();
    END IF;
    RETURN v_l;
END $$;

-- The first statement of AddGrant, in one transaction with
-- budgetd_add_grant: the answer stored for the call's Idempotency-Key, as
-- {"replay": answer}, when there is one; otherwise, with the limit's row and
-- the bucket locked until the transaction ends, what budgetd validates the
-- grant against (ledger.GrantExpiry): the bucket's terms at now (p_terms,
-- resolved in Go, checked and completed under the locks by
-- budgetd_bucket_terms), now, and whether locking inserted the bucket's
-- placeholder row (budgetd_lock_bucket).
CREATE OR REPLACE FUNCTION budgetd_grant_begin(p_limit text, p_key text, p_now timestamptz, p_scope text, p_idem text, p_hash text,
                                               p_terms text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_out     jsonb;
    v_l       limits;
    v_now     timestamptz;
    v_created boolean;
    v_b       buckets;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN jsonb_build_object('replay', v_out);
    END IF;
    v_l := budgetd_lock_limit(p_limit);
    v_created := budgetd_lock_bucket(v_l.id, p_key);
    v_now := coalesce(p_now, budgetd_clock());
    SELECT * INTO v_b FROM buckets WHERE limit_id = v_l.id AND key = p_key;
    v_l := budgetd_bucket_terms(v_l, p_key, p_terms::budgetd_terms_arg, v_b, v_now);
    RETURN jsonb_build_object('limit_id', v_l.id, 'created', v_created, 'limit', budgetd_limit_json(v_l),
                              'now_us', budgetd_us(v_now));
END $$;

-- Adds the grant budgetd validated after budgetd_grant_begin, in its
-- transaction (the locks it took still held, p_now its now): see
-- budgetd_grant_done.
CREATE OR REPLACE FUNCTION budgetd_add_grant(p_limit_id bigint, p_key text, p_amount text, p_expires_at timestamptz, p_now timestamptz,
                                             p_created boolean, p_scope text, p_idem text, p_hash text, p_meta text DEFAULT NULL,
                                             p_terms text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_g grants;
    v_l limits;
BEGIN
    INSERT INTO grants (limit_id, key, amount, expires_at, created_at)
    VALUES (p_limit_id, p_key, trim_scale(p_amount::numeric), p_expires_at, p_now)
    RETURNING * INTO v_g;
    UPDATE limits SET grant_rows = grant_rows + 1 WHERE id = p_limit_id RETURNING * INTO v_l;
    RETURN budgetd_grant_done(v_l, v_g, 'granted', p_now, p_created, p_scope, p_idem, p_hash, p_meta, p_terms::budgetd_terms_arg);
END $$;

-- Revokes the grant p_id ("g" and a number) of the bucket when it is active
-- at now; BD008 (grant_not_found) otherwise. See budgetd_grant_done.
CREATE OR REPLACE FUNCTION budgetd_revoke_grant(p_limit text, p_key text, p_id text, p_now timestamptz,
                                                p_scope text, p_idem text, p_hash text, p_meta text DEFAULT NULL,
                                                p_terms text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_out     jsonb;
    v_l       limits;
    v_g       grants;
    v_now     timestamptz;
    v_created boolean;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN v_out;
    END IF;
    v_l := budgetd_lock_limit(p_limit);
    v_created := budgetd_lock_bucket(v_l.id, p_key);
    v_now := coalesce(p_now, budgetd_clock());
    DELETE FROM grants
     WHERE limit_id = v_l.id AND key = p_key AND expires_at > v_now
       AND id = CASE WHEN p_id ~ '^g[0-9]{1,18}$' THEN substr(p_id, 2)::bigint END
    RETURNING * INTO v_g;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'grant "%" of %/% not found', p_id, p_limit, p_key USING ERRCODE = budgetd_code_grant_not_found();
    END IF;
    UPDATE limits SET grant_rows = grant_rows - 1 WHERE id = v_l.id RETURNING * INTO v_l;
    RETURN budgetd_grant_done(v_l, v_g, 'revoked', v_now, v_created, p_scope, p_idem, p_hash, p_meta, p_terms::budgetd_terms_arg);
END $$;

-- The end of a grant or a revocation of p_g on the limit p_l (its row as
-- updated), with the limit's row and the bucket locked: the p_event entry
-- (granted or revoked, with the grant's amount and id and the call's meta)
-- on a limit with history, after recording the bucket's expired holds as
-- every write does; the bucket's placeholder row removed when the lock
-- inserted it (p_created: a grant writes no bucket); the answer, with the
-- bucket under its terms now (p_t, resolved in Go: budgetd_bucket_terms),
-- stored for the Idempotency-Key.
CREATE OR REPLACE FUNCTION budgetd_grant_done(p_l limits, p_g grants, p_event text, p_now timestamptz, p_created boolean,
                                              p_scope text, p_idem text, p_hash text, p_meta text, p_t budgetd_terms_arg)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_e     limits;
    v_entry bigint;
    v_out   jsonb;
    v_b     buckets;
BEGIN
    SELECT * INTO v_b FROM buckets WHERE limit_id = p_l.id AND key = p_g.key;
    v_e := budgetd_bucket_terms(p_l, p_g.key, p_t, v_b, p_now);
    IF v_e.history THEN
        PERFORM budgetd_expire_holds(v_e, p_g.key, p_now);
        v_entry := budgetd_record(v_e, p_g.key, p_now, p_event, p_g.amount, NULL, p_meta, NULL, 'g' || p_g.id);
    END IF;
    IF p_created THEN
        DELETE FROM buckets WHERE limit_id = p_l.id AND key = p_g.key;
    END IF;
    v_out := jsonb_build_object('grant', budgetd_grant_json(p_g), 'entry_id', v_entry::text, 'limit', budgetd_limit_json(v_e),
                                'state', budgetd_state_json(p_l.id, p_g.key), 'now_us', budgetd_us(p_now));
    PERFORM budgetd_idem_put(p_scope, p_idem, p_hash, ARRAY[p_l.id], v_out, p_now);
    RETURN v_out;
END $$;

-- The bucket's grants active at p_now, oldest first, as budgetd_grant_json
-- writes them; NULL when the limit p_name does not exist.
CREATE OR REPLACE FUNCTION budgetd_list_grants(p_name text, p_key text, p_now timestamptz) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT (SELECT coalesce(jsonb_agg(budgetd_grant_json(g) ORDER BY g.id), '[]'::jsonb)
              FROM grants g WHERE g.limit_id = l.id AND g.key = p_key AND g.expires_at > p_now)
      FROM limits l WHERE l.name = p_name
$$;

-- Deletes up to p_batch grants expired at p_now (they count no more), taking
-- each one's limit row with SKIP LOCKED to keep its grant_rows exact; a
-- deleted limit's grants are left to budgetd_prune_deleted. Returns how many
-- it deleted.
CREATE OR REPLACE FUNCTION budgetd_prune_grants(p_now timestamptz, p_batch int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_r     record;
    v_n     int;
    v_total int := 0;
BEGIN
    FOR v_r IN SELECT DISTINCT s.limit_id
                 FROM (SELECT g.limit_id FROM grants g
                        WHERE g.expires_at <= p_now
                          AND EXISTS (SELECT 1 FROM limits l WHERE l.id = g.limit_id)
                        ORDER BY g.expires_at LIMIT p_batch) s LOOP
        PERFORM 1 FROM limits WHERE id = v_r.limit_id FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        DELETE FROM grants WHERE ctid = ANY (ARRAY(
            SELECT ctid FROM grants WHERE limit_id = v_r.limit_id AND expires_at <= p_now LIMIT p_batch));
        GET DIAGNOSTICS v_n = ROW_COUNT;
        UPDATE limits SET grant_rows = grant_rows - v_n WHERE id = v_r.limit_id;
        v_total := v_total + v_n;
    END LOOP;
    RETURN v_total;
END $$;
