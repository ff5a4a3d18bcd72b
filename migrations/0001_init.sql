-- 0001_init: the tables of budgetd.
--
-- Versioned migrations hold tables (data) only; the server-side functions
-- (code) live one per file in functions/ and are re-applied at start-up (see
-- migrations.go). This is the table part of the released 0001_init.sql: a
-- database that applied any released text of 0001-0005 has exactly these
-- tables.

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
