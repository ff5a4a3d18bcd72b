-- 0001_init: tables and the server-side functions of budgetd.
--
-- The atomic step of every operation is one plpgsql function (budgetd_fillup,
-- budgetd_reserve, ...): the store calls it with one statement, so a decision
-- costs one round trip, and at READ COMMITTED that statement is its own
-- transaction. The rule is the one of internal/bucket and docs/rounding.md:
--   leaked(dt) = floor(amount × dt_µs / per_µs, 12 fractional digits)
--   level(now) = max(0, level − leaked(now − updated)); a negative dt leaks nothing
-- Leak first, clamp at zero, then add. Functions return jsonb documents that the
-- Go side turns into ledger.Snapshot values; the same document is the stored
-- idempotency outcome.
--
-- Custom SQLSTATEs raised by the functions (translated in internal/postgres):
--   BD001 an idempotent duplicate committed first: retry to replay its answer
--   BD002 limit not found             BD003 too many holds
--   BD004 level overflow               BD005 reservation not found
--   BD006 idempotency key reused with another request

DO $$
BEGIN
    -- numeric extract(epoch …) and trim_scale.
    IF current_setting('server_version_num')::int < 140000 THEN
        RAISE EXCEPTION 'budgetd needs PostgreSQL 14 or later, this is %', current_setting('server_version');
    END IF;
END $$;

-- Limits. id is a generation: a deleted and re-created name gets a new id, so
-- the buckets, holds and history of the old limit are invisible at once and are
-- removed later in bounded batches (deleted_limits).
CREATE TABLE limits (
    id          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    name        text COLLATE "C" PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    capacity    numeric NOT NULL CHECK (capacity > 0 AND capacity <= 1000000000000),
    leak_amount numeric NOT NULL CHECK (leak_amount > 0 AND leak_amount <= 1000000000000),
    leak_per_us bigint  NOT NULL CHECK (leak_per_us > 0),
    history     boolean NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

-- Ids of deleted limits whose rows are still being pruned.
CREATE TABLE deleted_limits (
    id bigint PRIMARY KEY
);

-- Buckets that were written. updated_at is NULL only for a placeholder row that
-- a running call inserted to lock a bucket never written before; such a row is
-- either written or deleted before that call commits.
CREATE TABLE buckets (
    limit_id   bigint NOT NULL,
    key        text COLLATE "C" NOT NULL,
    level      numeric NOT NULL CHECK (level >= 0 AND level <= 1000000000000000),
    updated_at timestamptz,
    PRIMARY KEY (limit_id, key)
);

-- Holds. A hold counts while state = 'active' and now < expires_at; an active
-- hold past its expiry is recorded as 'expired' lazily (by the next write to its
-- bucket, a commit or release attempt, a history listing or the pruner).
CREATE TABLE holds (
    id               text COLLATE "C" PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,128}$'),
    limit_id         bigint NOT NULL,
    key              text COLLATE "C" NOT NULL,
    amount           numeric NOT NULL CHECK (amount > 0 AND amount <= 1000000000000),
    state            text NOT NULL CHECK (state IN ('active', 'committed', 'released', 'expired')),
    committed_amount numeric CHECK (committed_amount >= 0 AND committed_amount <= 1000000000000),
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    resolved_at      timestamptz,
    CHECK ((state = 'committed') = (committed_amount IS NOT NULL))
);
CREATE INDEX holds_bucket ON holds (limit_id, key, state);
CREATE INDEX holds_expires ON holds (expires_at);

-- History. ids grow with insertion; entries are listed by (at, id).
CREATE TABLE history (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    limit_id       bigint NOT NULL,
    key            text COLLATE "C" NOT NULL,
    at             timestamptz NOT NULL,
    event          text NOT NULL CHECK (event IN ('fillup', 'drain', 'reserved', 'committed', 'released', 'expired')),
    amount         numeric NOT NULL CHECK (amount >= 0 AND amount <= 1000000000000),
    reservation_id text COLLATE "C"
);
CREATE INDEX history_bucket ON history (limit_id, key, at DESC, id DESC);
CREATE INDEX history_at ON history (at);

-- Idempotency records: the outcome document of the first request, written in
-- the same transaction as its change. A record counts for 24 hours and only
-- while every limit it touched still exists.
CREATE TABLE idempotency (
    scope      text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    hash       text NOT NULL,
    limit_ids  bigint[] NOT NULL,
    outcome    jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_created ON idempotency (created_at);

------------------------------------------------------------------------------
-- Helpers.

-- The database clock, in whole microseconds.
CREATE FUNCTION budgetd_clock() RETURNS timestamptz
LANGUAGE sql VOLATILE AS $$ SELECT date_trunc('microseconds', clock_timestamp()) $$;

-- Microseconds since the Unix epoch (NULL stays NULL).
CREATE FUNCTION budgetd_us(t timestamptz) RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

CREATE FUNCTION budgetd_from_us(us bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$ SELECT timestamptz 'epoch' + (us::text || ' microseconds')::interval $$;

-- The level at p_now (bucket.LevelAt): leak rounded down to 12 digits, a clock
-- that went back leaks nothing, never below zero.
CREATE FUNCTION budgetd_level_at(p_level numeric, p_updated timestamptz, p_amount numeric, p_per bigint, p_now timestamptz)
RETURNS numeric LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_us  bigint;
    v_lvl numeric;
BEGIN
    IF p_level IS NULL THEN
        RETURN 0;
    END IF;
    IF p_level <= 0 OR p_updated IS NULL THEN
        RETURN greatest(p_level, 0);
    END IF;
    v_us := budgetd_us(p_now) - budgetd_us(p_updated);
    IF v_us <= 0 THEN
        RETURN p_level;
    END IF;
    v_lvl := p_level - div(p_amount * v_us * 1000000000000, p_per) * 0.000000000001;
    IF v_lvl <= 0 THEN
        RETURN 0;
    END IF;
    RETURN v_lvl;
END $$;

CREATE FUNCTION budgetd_limit(p_name text) RETURNS limits
LANGUAGE plpgsql AS $$
DECLARE
    v_l limits;
BEGIN
    SELECT * INTO v_l FROM limits WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'limit "%" not found', p_name USING ERRCODE = 'BD002';
    END IF;
    RETURN v_l;
END $$;

CREATE FUNCTION budgetd_limit_json(l limits) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('name', l.name, 'capacity', l.capacity::text, 'leak_amount', l.leak_amount::text,
        'leak_per_us', l.leak_per_us, 'history', l.history,
        'created_us', budgetd_us(l.created_at), 'updated_us', budgetd_us(l.updated_at))
$$;

-- A bucket as the rule sees it: level, updated and the holds not yet recorded
-- as resolved or expired (the rule ignores those past expires_at). One
-- statement, so that a reader without locks (Inspect) sees the row and its
-- holds in one snapshot.
CREATE FUNCTION budgetd_state_json(p_limit_id bigint, p_key text) RETURNS jsonb
LANGUAGE sql AS $$
    SELECT jsonb_build_object(
        'level', coalesce(b.level, 0)::text,
        'updated_us', budgetd_us(b.updated_at),
        'holds', (SELECT coalesce(jsonb_agg(jsonb_build_object('amount', h.amount::text, 'expires_us', budgetd_us(h.expires_at))
                                           ORDER BY h.expires_at, h.id), '[]'::jsonb)
                    FROM holds h
                   WHERE h.limit_id = p_limit_id AND h.key = p_key AND h.state = 'active'))
      FROM (SELECT 1) AS one
      LEFT JOIN buckets b ON b.limit_id = p_limit_id AND b.key = p_key
$$;

CREATE FUNCTION budgetd_hold_json(h holds, p_limit_name text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('id', h.id, 'limit', p_limit_name, 'key', h.key, 'amount', h.amount::text,
        'state', h.state, 'committed', h.committed_amount::text,
        'created_us', budgetd_us(h.created_at), 'expires_us', budgetd_us(h.expires_at),
        'resolved_us', budgetd_us(h.resolved_at))
$$;

-- Locks the bucket row, inserting an empty placeholder when the bucket was
-- never written. Returns true when it inserted the placeholder: the caller
-- must then write the row or delete it before it commits. Callers lock
-- buckets in (limit_id, key) order.
CREATE FUNCTION budgetd_lock_bucket(p_limit_id bigint, p_key text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    LOOP
        PERFORM 1 FROM buckets WHERE limit_id = p_limit_id AND key = p_key FOR UPDATE;
        IF FOUND THEN
            RETURN false;
        END IF;
        INSERT INTO buckets (limit_id, key, level, updated_at) VALUES (p_limit_id, p_key, 0, NULL)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN true;
        END IF;
        -- Someone else created it meanwhile: lock theirs.
    END LOOP;
END $$;

-- Adds a history entry when the limit keeps history. The caller holds the
-- bucket's lock. About one insert in 256 (by id) also trims the bucket to its
-- newest 10,000 entries, at most 1,000 rows at a time, so a busy bucket stays
-- near that cap without a per-insert cost.
CREATE FUNCTION budgetd_record(p_l limits, p_key text, p_at timestamptz, p_event text, p_amount numeric, p_res text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    IF NOT p_l.history THEN
        RETURN;
    END IF;
    INSERT INTO history (limit_id, key, at, event, amount, reservation_id)
    VALUES (p_l.id, p_key, p_at, p_event, p_amount, p_res)
    RETURNING id INTO v_id;
    IF v_id % 256 = 0 THEN
        DELETE FROM history WHERE id = ANY (ARRAY(
            SELECT id FROM history WHERE limit_id = p_l.id AND key = p_key
             ORDER BY at DESC, id DESC OFFSET 10000 LIMIT 1000));
    END IF;
END $$;

-- Records the holds of a bucket that have expired by p_now (time = expires_at).
-- The caller holds the bucket's lock.
CREATE FUNCTION budgetd_expire_holds(p_l limits, p_key text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    WITH e AS (
        UPDATE holds SET state = 'expired', resolved_at = expires_at
         WHERE limit_id = p_l.id AND key = p_key AND state = 'active' AND expires_at <= p_now
        RETURNING id, amount, expires_at)
    INSERT INTO history (limit_id, key, at, event, amount, reservation_id)
    SELECT p_l.id, p_key, e.expires_at, 'expired', e.amount, e.id
      FROM e WHERE p_l.history
     ORDER BY e.expires_at, e.id;
END $$;

-- Settles a locked bucket to p_now (bucket.Settled): records expired holds and
-- returns the leaked level. The caller writes it with budgetd_write.
CREATE FUNCTION budgetd_settle(p_l limits, p_key text, p_now timestamptz) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    v_b buckets;
BEGIN
    SELECT * INTO v_b FROM buckets WHERE limit_id = p_l.id AND key = p_key;
    PERFORM budgetd_expire_holds(p_l, p_key, p_now);
    RETURN budgetd_level_at(v_b.level, v_b.updated_at, p_l.leak_amount, p_l.leak_per_us, p_now);
END $$;

-- Writes a locked bucket: the new level, and updated moved to p_now unless
-- that would move it back.
CREATE FUNCTION budgetd_write(p_limit_id bigint, p_key text, p_level numeric, p_now timestamptz) RETURNS void
LANGUAGE sql AS $$
    UPDATE buckets
       SET level = trim_scale(p_level),
           updated_at = CASE WHEN updated_at IS NULL OR updated_at < p_now THEN p_now ELSE updated_at END
     WHERE limit_id = p_limit_id AND key = p_key
$$;

CREATE FUNCTION budgetd_limits_exist(p_ids bigint[]) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (SELECT 1 FROM unnest(p_ids) AS u(lid) WHERE NOT EXISTS (SELECT 1 FROM limits l WHERE l.id = u.lid))
$$;

-- Looks up an idempotency record: NULL when there is none (or it is older than
-- 24h, or a limit it touched was deleted), the stored outcome marked replayed
-- when the hash matches, BD006 otherwise.
CREATE FUNCTION budgetd_idem_get(p_scope text, p_key text, p_hash text, p_now timestamptz) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_r idempotency;
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RETURN NULL;
    END IF;
    SELECT * INTO v_r FROM idempotency WHERE scope = p_scope AND key = p_key;
    IF NOT FOUND OR v_r.created_at <= p_now - interval '24 hours' OR NOT budgetd_limits_exist(v_r.limit_ids) THEN
        RETURN NULL;
    END IF;
    IF v_r.hash <> p_hash THEN
        RAISE EXCEPTION 'idempotency key "%" was used with a different request', p_key USING ERRCODE = 'BD006';
    END IF;
    RETURN v_r.outcome || '{"replayed": true}'::jsonb;
END $$;

-- Stores an outcome for an idempotency key in the caller's transaction. When
-- a duplicate committed its record first, raises BD001: the whole call rolls
-- back and the store retries it, which then replays the first answer.
CREATE FUNCTION budgetd_idem_put(p_scope text, p_key text, p_hash text, p_limit_ids bigint[], p_outcome jsonb, p_now timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RETURN;
    END IF;
    INSERT INTO idempotency AS i (scope, key, hash, limit_ids, outcome, created_at)
    VALUES (p_scope, p_key, p_hash, p_limit_ids, p_outcome, p_now)
    ON CONFLICT (scope, key) DO UPDATE
       SET hash = EXCLUDED.hash, limit_ids = EXCLUDED.limit_ids, outcome = EXCLUDED.outcome, created_at = EXCLUDED.created_at
     WHERE i.created_at <= EXCLUDED.created_at - interval '24 hours' OR NOT budgetd_limits_exist(i.limit_ids);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a request with idempotency key "%" finished first', p_key USING ERRCODE = 'BD001';
    END IF;
END $$;

------------------------------------------------------------------------------
-- Limits.

CREATE FUNCTION budgetd_put_limit(p_name text, p_capacity text, p_leak_amount text, p_per_us bigint, p_history boolean, p_now timestamptz)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, budgetd_clock());
    v_l   limits;
BEGIN
    INSERT INTO limits AS l (name, capacity, leak_amount, leak_per_us, history, created_at, updated_at)
    VALUES (p_name, p_capacity::numeric, p_leak_amount::numeric, p_per_us, p_history, v_now, v_now)
    ON CONFLICT (name) DO UPDATE
       SET capacity = EXCLUDED.capacity, leak_amount = EXCLUDED.leak_amount, leak_per_us = EXCLUDED.leak_per_us,
           history = EXCLUDED.history, updated_at = EXCLUDED.updated_at
    RETURNING * INTO v_l;
    RETURN budgetd_limit_json(v_l);
END $$;

------------------------------------------------------------------------------
-- Buckets.

-- Inspect: the bucket as it is, writing nothing.
CREATE FUNCTION budgetd_inspect(p_limit text, p_key text, p_now timestamptz) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_l   limits := budgetd_limit(p_limit);
    v_now timestamptz := coalesce(p_now, budgetd_clock());
BEGIN
    RETURN jsonb_build_object('limit', budgetd_limit_json(v_l), 'state', budgetd_state_json(v_l.id, p_key),
                              'now_us', budgetd_us(v_now));
END $$;

-- Fillup: every item or none (bucket.Fillup per item). Items are distinct
-- buckets; they are locked in (limit_id, key) order.
CREATE FUNCTION budgetd_fillup(p_limits text[], p_keys text[], p_costs text[], p_now timestamptz,
                               p_scope text, p_idem text, p_hash text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_n        int := coalesce(array_length(p_limits, 1), 0);
    v_out      jsonb;
    v_now      timestamptz;
    v_lims     limits[];
    v_ids      bigint[];
    v_costs    numeric[];
    v_created  boolean[];
    v_fits     boolean[];
    v_items    jsonb[];
    v_accepted boolean := true;
    v_l        limits;
    v_b        buckets;
    v_held     numeric;
    v_level    numeric;
    v_r        record;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN v_out;
    END IF;
    -- Every limit first: an unknown one fails the call before anything is locked.
    FOR i IN 1 .. v_n LOOP
        v_l := budgetd_limit(p_limits[i]);
        v_lims[i] := v_l;
        v_ids[i] := v_l.id;
        v_costs[i] := p_costs[i]::numeric;
        v_created[i] := false;
    END LOOP;
    FOR v_r IN SELECT u.ord FROM unnest(v_ids, p_keys) WITH ORDINALITY AS u(lid, k, ord) ORDER BY u.lid, u.k COLLATE "C" LOOP
        v_created[v_r.ord] := budgetd_lock_bucket(v_ids[v_r.ord], p_keys[v_r.ord]);
    END LOOP;
    v_now := coalesce(p_now, budgetd_clock());
    FOR i IN 1 .. v_n LOOP
        v_l := v_lims[i];
        SELECT * INTO v_b FROM buckets WHERE limit_id = v_l.id AND key = p_keys[i];
        SELECT coalesce(sum(amount), 0) INTO v_held
          FROM holds WHERE limit_id = v_l.id AND key = p_keys[i] AND state = 'active' AND expires_at > v_now;
        v_level := budgetd_level_at(v_b.level, v_b.updated_at, v_l.leak_amount, v_l.leak_per_us, v_now);
        v_fits[i] := v_costs[i] = 0 OR v_level + v_held + v_costs[i] <= v_l.capacity;
        v_accepted := v_accepted AND v_fits[i];
    END LOOP;
    FOR i IN 1 .. v_n LOOP
        v_l := v_lims[i];
        IF v_accepted AND v_costs[i] > 0 THEN
            v_level := budgetd_settle(v_l, p_keys[i], v_now);
            PERFORM budgetd_write(v_l.id, p_keys[i], v_level + v_costs[i], v_now);
            PERFORM budgetd_record(v_l, p_keys[i], v_now, 'fillup', v_costs[i], NULL);
        ELSIF v_created[i] THEN
            DELETE FROM buckets WHERE limit_id = v_l.id AND key = p_keys[i];
        END IF;
        v_items[i] := jsonb_build_object('fits', v_fits[i], 'limit', budgetd_limit_json(v_l),
                                         'state', budgetd_state_json(v_l.id, p_keys[i]));
    END LOOP;
    v_out := jsonb_build_object('accepted', v_accepted, 'now_us', budgetd_us(v_now), 'items', to_jsonb(v_items));
    PERFORM budgetd_idem_put(p_scope, p_idem, p_hash, v_ids, v_out, v_now);
    RETURN v_out;
END $$;

-- Drain: lowers the level, clamped at zero (bucket.Drain). Zero is a no-op.
CREATE FUNCTION budgetd_drain(p_limit text, p_key text, p_amount text, p_now timestamptz,
                              p_scope text, p_idem text, p_hash text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_amount  numeric := p_amount::numeric;
    v_removed numeric := 0;
    v_out     jsonb;
    v_now     timestamptz;
    v_l       limits;
    v_level   numeric;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN v_out;
    END IF;
    v_l := budgetd_limit(p_limit);
    IF v_amount > 0 THEN
        PERFORM budgetd_lock_bucket(v_l.id, p_key);
        v_now := coalesce(p_now, budgetd_clock());
        v_level := budgetd_settle(v_l, p_key, v_now);
        v_removed := least(v_amount, v_level);
        PERFORM budgetd_write(v_l.id, p_key, v_level - v_removed, v_now);
        PERFORM budgetd_record(v_l, p_key, v_now, 'drain', v_removed, NULL);
    ELSE
        v_now := coalesce(p_now, budgetd_clock());
    END IF;
    v_out := jsonb_build_object('removed', v_removed::text, 'limit', budgetd_limit_json(v_l),
                                'state', budgetd_state_json(v_l.id, p_key), 'now_us', budgetd_us(v_now));
    PERFORM budgetd_idem_put(p_scope, p_idem, p_hash, ARRAY[v_l.id], v_out, v_now);
    RETURN v_out;
END $$;

-- Reserve: adds a hold p_id of p_amount for p_ttl_us when it fits
-- (bucket.Reserve). BD003 when the bucket has 1000 active holds.
CREATE FUNCTION budgetd_reserve(p_limit text, p_key text, p_amount text, p_ttl_us bigint, p_id text, p_now timestamptz,
                                p_scope text, p_idem text, p_hash text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_amount   numeric := p_amount::numeric;
    v_out      jsonb;
    v_now      timestamptz;
    v_l        limits;
    v_b        buckets;
    v_h        holds;
    v_created  boolean;
    v_held     numeric;
    v_count    bigint;
    v_level    numeric;
    v_accepted boolean;
    v_res      jsonb := NULL;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN v_out;
    END IF;
    v_l := budgetd_limit(p_limit);
    v_created := budgetd_lock_bucket(v_l.id, p_key);
    v_now := coalesce(p_now, budgetd_clock());
    SELECT coalesce(sum(amount), 0), count(*) INTO v_held, v_count
      FROM holds WHERE limit_id = v_l.id AND key = p_key AND state = 'active' AND expires_at > v_now;
    IF v_count >= 1000 THEN
        RAISE EXCEPTION 'bucket has % active holds', v_count USING ERRCODE = 'BD003';
    END IF;
    SELECT * INTO v_b FROM buckets WHERE limit_id = v_l.id AND key = p_key;
    v_level := budgetd_level_at(v_b.level, v_b.updated_at, v_l.leak_amount, v_l.leak_per_us, v_now);
    v_accepted := v_amount = 0 OR v_level + v_held + v_amount <= v_l.capacity;
    IF v_accepted THEN
        v_level := budgetd_settle(v_l, p_key, v_now);
        PERFORM budgetd_write(v_l.id, p_key, v_level, v_now);
        INSERT INTO holds (id, limit_id, key, amount, state, created_at, expires_at)
        VALUES (p_id, v_l.id, p_key, v_amount, 'active', v_now, v_now + (p_ttl_us::text || ' microseconds')::interval)
        RETURNING * INTO v_h;
        PERFORM budgetd_record(v_l, p_key, v_now, 'reserved', v_amount, p_id);
        v_res := budgetd_hold_json(v_h, v_l.name);
    ELSIF v_created THEN
        DELETE FROM buckets WHERE limit_id = v_l.id AND key = p_key;
    END IF;
    v_out := jsonb_build_object('accepted', v_accepted, 'reservation', v_res, 'limit', budgetd_limit_json(v_l),
                                'state', budgetd_state_json(v_l.id, p_key), 'now_us', budgetd_us(v_now));
    PERFORM budgetd_idem_put(p_scope, p_idem, p_hash, ARRAY[v_l.id], v_out, v_now);
    RETURN v_out;
END $$;

-- Commit (p_commit) or release a hold (bucket.Resolve). Refusals are part of
-- the outcome: reservation_expired, reservation_closed, exceeds_hold.
CREATE FUNCTION budgetd_resolve(p_id text, p_commit boolean, p_amount text, p_overrun boolean, p_now timestamptz,
                                p_scope text, p_idem text, p_hash text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_out     jsonb;
    v_now     timestamptz;
    v_h       holds;
    v_l       limits;
    v_created boolean;
    v_wrote   boolean := false;
    v_refusal text := '';
    v_charge  numeric;
    v_level   numeric;
BEGIN
    v_out := budgetd_idem_get(p_scope, p_idem, p_hash, coalesce(p_now, budgetd_clock()));
    IF v_out IS NOT NULL THEN
        RETURN v_out;
    END IF;
    SELECT * INTO v_h FROM holds WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reservation "%" not found', p_id USING ERRCODE = 'BD005';
    END IF;
    SELECT * INTO v_l FROM limits WHERE id = v_h.limit_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reservation "%" not found', p_id USING ERRCODE = 'BD005';
    END IF;
    v_created := budgetd_lock_bucket(v_l.id, v_h.key);
    -- Read the hold again under its bucket's lock: every change to a hold
    -- happens under that lock.
    SELECT * INTO v_h FROM holds WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reservation "%" not found', p_id USING ERRCODE = 'BD005';
    END IF;
    v_now := coalesce(p_now, budgetd_clock());
    IF v_h.state = 'expired' OR (v_h.state = 'active' AND v_now >= v_h.expires_at) THEN
        PERFORM budgetd_expire_holds(v_l, v_h.key, v_now);
        v_refusal := 'reservation_expired';
    ELSIF p_commit THEN
        v_charge := coalesce(p_amount::numeric, v_h.amount);
        IF v_h.state = 'committed' THEN
            IF v_h.committed_amount <> v_charge THEN
                v_refusal := 'reservation_closed';
            END IF;
        ELSIF v_h.state = 'released' THEN
            v_refusal := 'reservation_closed';
        ELSIF v_charge > v_h.amount AND NOT p_overrun THEN
            v_refusal := 'exceeds_hold';
        ELSE
            v_level := budgetd_settle(v_l, v_h.key, v_now);
            IF v_level + v_charge > 1000000000000000 THEN
                RAISE EXCEPTION 'level % + % would exceed 10^15', v_level, v_charge USING ERRCODE = 'BD004';
            END IF;
            PERFORM budgetd_write(v_l.id, v_h.key, v_level + v_charge, v_now);
            UPDATE holds SET state = 'committed', committed_amount = v_charge, resolved_at = v_now WHERE id = p_id;
            PERFORM budgetd_record(v_l, v_h.key, v_now, 'committed', v_charge, p_id);
            v_wrote := true;
        END IF;
    ELSE
        IF v_h.state = 'committed' THEN
            v_refusal := 'reservation_closed';
        ELSIF v_h.state = 'active' THEN
            v_level := budgetd_settle(v_l, v_h.key, v_now);
            PERFORM budgetd_write(v_l.id, v_h.key, v_level, v_now);
            UPDATE holds SET state = 'released', resolved_at = v_now WHERE id = p_id;
            PERFORM budgetd_record(v_l, v_h.key, v_now, 'released', v_h.amount, p_id);
            v_wrote := true;
        END IF;
    END IF;
    IF v_created AND NOT v_wrote THEN
        DELETE FROM buckets WHERE limit_id = v_l.id AND key = v_h.key;
    END IF;
    SELECT * INTO v_h FROM holds WHERE id = p_id;
    v_out := jsonb_build_object('reservation', budgetd_hold_json(v_h, v_l.name), 'refusal', v_refusal,
                                'limit', budgetd_limit_json(v_l), 'state', budgetd_state_json(v_l.id, v_h.key),
                                'now_us', budgetd_us(v_now));
    PERFORM budgetd_idem_put(p_scope, p_idem, p_hash, ARRAY[v_l.id], v_out, v_now);
    RETURN v_out;
END $$;

-- A hold as stored, with the clock; writes nothing.
CREATE FUNCTION budgetd_reservation(p_id text, p_now timestamptz) RETURNS jsonb
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
        RAISE EXCEPTION 'reservation "%" not found', p_id USING ERRCODE = 'BD005';
    END IF;
    RETURN jsonb_build_object('reservation', budgetd_hold_json(v_h, v_name),
                              'now_us', budgetd_us(coalesce(p_now, budgetd_clock())));
END $$;

-- History: records due expiries of the bucket, then lists up to p_n + 1
-- entries older than (p_after_us, p_after_id), newest first.
CREATE FUNCTION budgetd_history(p_limit text, p_key text, p_after_us bigint, p_after_id bigint, p_n int, p_now timestamptz)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_l     limits := budgetd_limit(p_limit);
    v_now   timestamptz;
    v_after timestamptz := budgetd_from_us(p_after_us);
BEGIN
    IF NOT v_l.history THEN
        RETURN '[]'::jsonb;
    END IF;
    v_now := coalesce(p_now, budgetd_clock());
    IF EXISTS (SELECT 1 FROM holds WHERE limit_id = v_l.id AND key = p_key AND state = 'active' AND expires_at <= v_now) THEN
        PERFORM 1 FROM buckets WHERE limit_id = v_l.id AND key = p_key FOR UPDATE;
        PERFORM budgetd_expire_holds(v_l, p_key, v_now);
    END IF;
    RETURN coalesce((
        SELECT jsonb_agg(jsonb_build_object('id', h.id::text, 'at_us', budgetd_us(h.at), 'event', h.event,
                                            'amount', h.amount::text, 'reservation_id', h.reservation_id)
                         ORDER BY h.at DESC, h.id DESC)
          FROM (SELECT * FROM history
                 WHERE limit_id = v_l.id AND key = p_key
                   AND (p_after_us IS NULL OR (at, id) < (v_after, p_after_id))
                 ORDER BY at DESC, id DESC
                 LIMIT p_n + 1) h), '[]'::jsonb);
END $$;

------------------------------------------------------------------------------
-- Pruning, in bounded batches; each call is its own short transaction and
-- takes bucket locks only with SKIP LOCKED.

-- Records expired holds as expired, for up to p_batch of them.
CREATE FUNCTION budgetd_prune_expired(p_now timestamptz, p_batch int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_r record;
    v_l limits;
    v_n int := 0;
BEGIN
    FOR v_r IN SELECT DISTINCT s.limit_id, s.key
                 FROM (SELECT limit_id, key FROM holds
                        WHERE state = 'active' AND expires_at <= p_now
                        ORDER BY expires_at LIMIT p_batch) s LOOP
        SELECT * INTO v_l FROM limits WHERE id = v_r.limit_id;
        IF NOT FOUND THEN
            -- The limit was deleted: no history to write.
            UPDATE holds SET state = 'expired', resolved_at = expires_at
             WHERE limit_id = v_r.limit_id AND key = v_r.key AND state = 'active' AND expires_at <= p_now;
            v_n := v_n + 1;
            CONTINUE;
        END IF;
        PERFORM 1 FROM buckets WHERE limit_id = v_r.limit_id AND key = v_r.key FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            PERFORM budgetd_expire_holds(v_l, v_r.key, p_now);
            v_n := v_n + 1;
        END IF;
    END LOOP;
    RETURN v_n;
END $$;

-- Deletes up to p_batch each of: holds resolved or expired more than 24h ago,
-- history older than 30 days, idempotency records older than 25h.
CREATE FUNCTION budgetd_prune_rows(p_now timestamptz, p_batch int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n     int;
    v_total int := 0;
BEGIN
    DELETE FROM holds WHERE id = ANY (ARRAY(
        SELECT id FROM holds
         WHERE expires_at < p_now - interval '24 hours' AND state <> 'active'
           AND coalesce(resolved_at, expires_at) < p_now - interval '24 hours'
         LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM history WHERE id = ANY (ARRAY(
        SELECT id FROM history WHERE at < p_now - interval '30 days' LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM idempotency WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM idempotency WHERE created_at < p_now - interval '25 hours' LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    RETURN v_total;
END $$;

-- Deletes up to p_batch rows of each table for one deleted limit; forgets the
-- limit once nothing is left. Returns the rows deleted (a forgotten limit
-- counts one); 0 when no deleted limit is waiting.
CREATE FUNCTION budgetd_prune_deleted(p_batch int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_id    bigint;
    v_n     int;
    v_total int := 0;
BEGIN
    SELECT id INTO v_id FROM deleted_limits ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    DELETE FROM buckets WHERE ctid = ANY (ARRAY(SELECT ctid FROM buckets WHERE limit_id = v_id LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM holds WHERE id = ANY (ARRAY(SELECT id FROM holds WHERE limit_id = v_id LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    DELETE FROM history WHERE id = ANY (ARRAY(SELECT id FROM history WHERE limit_id = v_id LIMIT p_batch));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    -- Less than a batch everywhere: nothing of the limit is left.
    IF v_total < p_batch THEN
        DELETE FROM deleted_limits WHERE id = v_id;
        v_total := v_total + 1;
    END IF;
    RETURN v_total;
END $$;

-- Scans up to p_batch buckets after the cursor (p_after_limit, p_after_key) and
-- deletes those that are empty at p_now with no active hold and no history
-- left, or whose limit is gone. Returns the cursor to continue from (NULL once
-- the scan reached the end) and how many it deleted.
CREATE FUNCTION budgetd_prune_buckets(p_after_limit bigint, p_after_key text, p_now timestamptz, p_batch int,
                                      OUT next_limit bigint, OUT next_key text, OUT deleted int)
LANGUAGE plpgsql AS $$
DECLARE
    v_r       record;
    v_scanned int := 0;
    v_n       int;
BEGIN
    deleted := 0;
    FOR v_r IN SELECT b.limit_id, b.key, b.level, b.updated_at, l.id AS lid, l.leak_amount, l.leak_per_us
                 FROM buckets b LEFT JOIN limits l ON l.id = b.limit_id
                WHERE (b.limit_id, b.key) > (p_after_limit, p_after_key COLLATE "C")
                ORDER BY b.limit_id, b.key
                LIMIT p_batch LOOP
        v_scanned := v_scanned + 1;
        next_limit := v_r.limit_id;
        next_key := v_r.key;
        IF v_r.lid IS NOT NULL AND (budgetd_level_at(v_r.level, v_r.updated_at, v_r.leak_amount, v_r.leak_per_us, p_now) > 0
            OR v_r.updated_at IS NULL) THEN
            CONTINUE;
        END IF;
        PERFORM 1 FROM buckets WHERE limit_id = v_r.limit_id AND key = v_r.key FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        -- Check again on the latest version, under the lock.
        DELETE FROM buckets b
         WHERE b.limit_id = v_r.limit_id AND b.key = v_r.key
           AND (NOT EXISTS (SELECT 1 FROM limits l WHERE l.id = b.limit_id)
                OR (b.updated_at IS NOT NULL
                    AND budgetd_level_at(b.level, b.updated_at, v_r.leak_amount, v_r.leak_per_us, p_now) = 0
                    AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.limit_id = b.limit_id AND h.key = b.key AND h.state = 'active')
                    AND NOT EXISTS (SELECT 1 FROM history e WHERE e.limit_id = b.limit_id AND e.key = b.key)));
        GET DIAGNOSTICS v_n = ROW_COUNT;
        deleted := deleted + v_n;
    END LOOP;
    IF v_scanned < p_batch THEN
        next_limit := NULL;
        next_key := NULL;
    END IF;
END $$;
